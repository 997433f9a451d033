// The wait for one refit's report (src/bus/refit-report.ts) against a real nats-server, with test
// responders standing in for the gateway on `<root>.refit.request`: the report is taken from the
// reply, the report event, the report subject or the journal, whichever comes first, and never a
// report of another refit id (or of the same id to another version).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openBuckets, type FleetBuckets } from '../../src/bus/buckets.ts';
import { BusNoResponders, BusRemoteError, BusTimeout, connectBus, type Bus, type BusSubscription } from '../../src/bus/connection.ts';
import { watchRefitReport } from '../../src/bus/refit-report.ts';
import { subjects } from '../../src/bus/subjects.ts';
import type { RefitJournal } from '../../src/wire/refit-journal.ts';
import { startTestNats, type TestNats } from '../fixtures/nats-server.ts';

const report = (id: string, version = '1', failed: unknown[] = []) => ({
  id,
  status: failed.length ? 'partial' : 'succeeded',
  weight_version: version,
  engines: [],
  failed,
  skipped: [],
});
/** A done journal holding only what the wait reads. */
const doneJournal = (id: string, r: unknown) => ({ id, status: 'done', report: r }) as unknown as RefitJournal;
const event = (refitId: string, r: unknown) => ({ refit_id: refitId, time: new Date().toISOString(), type: 'report', report: r });

describe('the wait for a refit report', () => {
  let nats: TestNats;
  let gateway: Bus; // publishes and answers as a gateway replica would
  let trainer: Bus;
  let buckets: FleetBuckets;
  beforeAll(async () => {
    nats = await startTestNats();
    gateway = await connectBus({ url: nats.url, name: 'test-gateway' });
    trainer = await connectBus({ url: nats.url, name: 'test-trainer' });
    buckets = await openBuckets(gateway.nc, 'rl');
  });
  afterAll(async () => {
    await trainer?.close();
    await gateway?.close();
    await nats?.stop();
  });

  /** A responder that takes every request and never answers (a replica that died holding it). */
  async function silentResponder(root: string, onRequest: () => void): Promise<BusSubscription> {
    const sub = gateway.respond(
      subjects(root).refitRequest(),
      () => {
        onRequest();
        return new Promise(() => {});
      },
      { queue: 'rlgate-refits' },
    );
    // The subscription is on the server before anyone asks (another connection asks).
    await gateway.nc.flush();
    return sub;
  }

  it('ignores reports of other refit ids and of earlier versions of its id; takes its own from the report subject', async () => {
    const s = subjects('rl');
    const watch = await watchRefitReport(trainer, { root: 'rl', refitId: 'mine', weightVersion: '2', pollMs: 50 });
    const strays = async () => {
      gateway.publish(s.refitEvents('mine'), event('other', report('other', '2')));
      gateway.publish(s.refitEvents('mine'), event('mine', report('other', '2')));
      gateway.publish(s.refitReport('mine'), report('other', '2'));
      gateway.publish(s.refitReport('mine'), report('mine', '1')); // the same id to another version: an earlier refit's
      gateway.publish(s.refitEvents('other'), event('other', report('other', '2')));
      await buckets.refits.put('mine', doneJournal('mine', report('mine', '1')));
      await buckets.refits.put('other', doneJournal('other', report('other', '2')));
    };
    let asked = 0;
    const sub = await silentResponder('rl', () => void asked++);
    try {
      await strays();
      // Nothing of this refit came, and the journal holds an earlier version's report: the deadline ends the wait.
      await expect(watch.ask({ refit_id: 'mine', weight_version: '2' }, 1_000)).rejects.toBeInstanceOf(BusTimeout);
      expect(asked).toBe(1);
      const asking = watch.ask({ refit_id: 'mine', weight_version: '2' }, 10_000);
      await strays();
      gateway.publish(s.refitReport('mine'), report('mine', '2', [{ url: 'http://e1' }]));
      const answer = await asking;
      expect(answer).toEqual({ status: 207, report: report('mine', '2', [{ url: 'http://e1' }]), from: 'report_subject' });
    } finally {
      sub.unsubscribe();
      await watch.close();
      await buckets.refits.delete('mine');
    }
  });

  it('takes the report event while the reply never comes, and passes every event on', async () => {
    const s = subjects('rl');
    const seen: unknown[] = [];
    const watch = await watchRefitReport(trainer, { root: 'rl', refitId: 'by-event', weightVersion: '3', onEvent: (e) => void seen.push(e) });
    const sub = await silentResponder('rl', () => {
      gateway.publish(s.refitEvents('by-event'), { refit_id: 'by-event', type: 'accepted' });
      gateway.publish(s.refitEvents('by-event'), event('by-event', report('by-event', '3')));
    });
    try {
      const answer = await watch.ask({ refit_id: 'by-event', weight_version: '3' }, 10_000);
      expect(answer).toEqual({ status: 200, report: report('by-event', '3'), from: 'event' });
      await watch.close();
      expect(seen.map((e) => (e as { type: string }).type)).toEqual(['accepted', 'report']);
    } finally {
      sub.unsubscribe();
      await watch.close();
    }
  });

  it("with no responders, reads the journal: its own done report is taken, another version's is not", async () => {
    const root = 'lonely';
    const lonely = await openBuckets(gateway.nc, root);
    await lonely.refits.put('gone', doneJournal('gone', report('gone', '4')));
    await lonely.refits.put('old', doneJournal('old', report('old', '1')));
    const done = await watchRefitReport(trainer, { root, refitId: 'gone', weightVersion: '4' });
    const old = await watchRefitReport(trainer, { root, refitId: 'old', weightVersion: '5' });
    try {
      expect(await done.ask({ refit_id: 'gone', weight_version: '4' }, 10_000)).toEqual({ status: 200, report: report('gone', '4'), from: 'journal' });
      await expect(old.ask({ refit_id: 'old', weight_version: '5' }, 10_000)).rejects.toBeInstanceOf(BusNoResponders);
    } finally {
      await done.close();
      await old.close();
    }
  });

  it('the reply wins when it comes first; an error reply is thrown as is (a refused refit has no report)', async () => {
    const root = 'answering';
    const sub = gateway.respond(subjects(root).refitRequest(), async (body) => {
      const version = (body as { weight_version: string }).weight_version;
      if (version === 'refused') throw Object.assign(new Error('no engine matches'), { code: 'no_workers_match' });
      return { status: 200, report: report('answered', version) };
    });
    await gateway.nc.flush();
    const ok = await watchRefitReport(trainer, { root, refitId: 'answered', weightVersion: '6' });
    const no = await watchRefitReport(trainer, { root, refitId: 'answered', weightVersion: 'refused' });
    try {
      expect(await ok.ask({ refit_id: 'answered', weight_version: '6' }, 10_000)).toEqual({ status: 200, report: report('answered', '6'), from: 'reply' });
      const refused = await no.ask({ refit_id: 'answered', weight_version: 'refused' }, 10_000).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(BusRemoteError);
      expect(refused).toMatchObject({ code: 'no_workers_match' });
    } finally {
      sub.unsubscribe();
      await ok.close();
      await no.close();
    }
  });
});
