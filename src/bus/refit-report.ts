// The report of one refit, for the client that asked for it (`rlgate refit`, the trainer): the
// refit's events and report subjects subscribed before the request goes out, the request sent on
// `<root>.refit.request`, and the report taken from whichever comes first of the reply, the
// `report` event on `<root>.refit.<id>.events`, `<root>.refit.<id>.report`, and the refit's
// journal in the refits bucket (read twice a second, and at once when the reply fails). The reply
// alone is not enough: the replica holding the request may die while another one finishes the
// refit. Only this refit's report is taken (its id, and the version asked for). It never
// publishes on the refit queue and never writes a bucket.

import { Kvm, type KV } from '@nats-io/kv';
import { bucketName, JsonBucket } from './buckets.ts';
import { BusNoResponders, BusRemoteError, BusTimeout, BusUnavailable, type Bus } from './connection.ts';
import { subjects } from './subjects.ts';
import type { RefitJournal } from '../wire/refit-journal.ts';

/** Where the report came from. */
export type RefitReportSource = 'reply' | 'event' | 'report_subject' | 'journal';

export interface RefitAnswer {
  /** The reply's status; from another source, 200 when no engine failed, else 207 (as the reply would say). */
  status: number;
  report: unknown;
  from: RefitReportSource;
}

export interface RefitReportOptions {
  root: string;
  refitId: string;
  /** The version asked for: a report of the same id to another version is an earlier refit's. */
  weightVersion?: string;
  /** Every event of this refit, for a progress view. */
  onEvent?: (event: unknown) => void;
  /** How often the journal is read while waiting; default 500 ms, so a report only the journal holds is seen within a second. */
  pollMs?: number;
  /** What the wait could not do (a refits bucket these credentials may not read, a resend). */
  log?: (line: string) => void;
}

export interface RefitReportWatch {
  /**
   * Sends `body` (the refit request, with this refit id) and resolves with the first report. Over
   * a lost connection the same request is sent again once NATS is back (the same id is the same
   * refit); after no responders it is asked again while a report may still come, if an earlier
   * send may have reached a gateway. Throws the reply's BusRemoteError (refused: there is no
   * report), BusNoResponders (no gateway, no report), or BusTimeout once `timeoutMs` has passed.
   */
  ask(body: unknown, timeoutMs: number): Promise<RefitAnswer>;
  /** Lets the events already on their way land, then drops the subscriptions and the journal reads. */
  close(): Promise<void>;
}

const NO_RESPONDERS_RETRY_MS = 1_000;
/** A journal read at the moment the reply failed is bounded: the caller's deadline may be now. */
const JOURNAL_READ_MS = 1_000;

const record = (v: unknown): Record<string, unknown> | undefined =>
  v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;

/** The status the reply would carry for `report`: 200 only when no engine failed. */
export function refitReportStatus(report: unknown): 200 | 207 {
  const failed = record(report)?.failed;
  return Array.isArray(failed) && failed.length === 0 ? 200 : 207;
}

/** Subscribes to the refit's events and report (in place on the server when this resolves). */
export async function watchRefitReport(bus: Bus, opts: RefitReportOptions): Promise<RefitReportWatch> {
  const subj = subjects(opts.root);
  const { refitId } = opts;
  const request = subj.refitRequest();
  const version = opts.weightVersion?.trim(); // the gateway trims it, as it stores it
  const log = opts.log ?? (() => {});
  const pollMs = opts.pollMs ?? 500;

  let closed = false;
  let found!: (answer: RefitAnswer) => void;
  const reported = new Promise<RefitAnswer>((resolve) => (found = resolve));
  let answer: RefitAnswer | undefined;
  const take = (report: unknown, from: RefitReportSource) => {
    const r = record(report);
    if (answer || !r || r.id !== refitId || (version !== undefined && r.weight_version !== version)) return;
    answer = { status: refitReportStatus(r), report: r, from };
    found(answer);
  };

  const events = bus.subscribe(subj.refitEvents(refitId), (data) => {
    try {
      opts.onEvent?.(data);
    } finally {
      const e = record(data);
      if (e?.type === 'report' && e.refit_id === refitId) take(e.report, 'event');
    }
  });
  const reports = bus.subscribe(subj.refitReport(refitId), (data) => take(data, 'report_subject'));
  await bus.nc.flush();

  // The journal: the authoritative copy, there even when the publishes were missed (our
  // connection dropped) or never made (the runner died between its journal write and them).
  let kv: KV | undefined;
  let journalReadable = true;
  let reading: Promise<void> | undefined;
  const readJournal = (): Promise<void> => {
    if (answer || closed || !journalReadable || !bus.connected) return Promise.resolve();
    reading ??= (async () => {
      try {
        kv ??= await new Kvm(bus.nc).open(bucketName(opts.root, 'refits'));
        const entry = await new JsonBucket<RefitJournal>(kv).get(refitId);
        if (entry?.value.status === 'done') take(entry.value.report, 'journal');
      } catch (err) {
        const text = `${(err as Error)?.message ?? err} ${((err as Error)?.cause as Error | undefined)?.message ?? ''}`.trim();
        if (/permission/i.test(text)) {
          journalReadable = false;
          log(
            `the refits bucket cannot be read with these credentials (${text}); waiting for the reply and the report on ${subj.refitEvents(refitId)} or ${subj.refitReport(refitId)} only`,
          );
        }
        kv = undefined; // not there yet, or NATS was away: opened again next time
      } finally {
        reading = undefined;
      }
    })();
    return reading;
  };
  let pollTimer: NodeJS.Timeout | undefined;
  const poll = () => {
    pollTimer = setTimeout(() => void readJournal().finally(() => !answer && !closed && poll()), pollMs);
  };

  return {
    async ask(body, timeoutMs) {
      if (closed) throw new Error('the refit report watch is closed');
      const deadline = Date.now() + timeoutMs;
      // Once the timer has fired the time is up, whatever Date.now() says: the timer's clock and
      // the wall clock round apart by a millisecond, and a request sent with 1 ms left would reach
      // a gateway all the same.
      let over = false;
      const left = () => (over ? 0 : deadline - Date.now());
      let expire!: () => void;
      const expired = new Promise<'expired'>((resolve) => (expire = () => ((over = true), resolve('expired'))));
      const timer = setTimeout(expire, timeoutMs);
      const waitFor = <T>(p: Promise<T>) => Promise.race([p, reported, expired]);
      const fromJournal = async () => {
        await Promise.race([readJournal(), new Promise((resolve) => setTimeout(resolve, JOURNAL_READ_MS).unref())]);
        return answer;
      };
      if (!pollTimer) poll();
      let sent = false; // an earlier send may have reached a gateway
      try {
        for (;;) {
          if (answer) return answer;
          if (left() <= 0) {
            const last = await fromJournal();
            if (last) return last;
            throw new BusTimeout(request, timeoutMs);
          }
          // Read leniently: any responder on the subject may answer (a gateway answers a RefitReply).
          const replied = bus.request<{ status: number; report?: unknown }>(request, body, left()).then(
            (reply) => ({ reply }),
            (err: unknown) => ({ err }),
          );
          const first = await waitFor(replied);
          if (first === 'expired') continue;
          if ('from' in first) return first;
          if ('reply' in first) return { status: first.reply.status, report: first.reply.report, from: 'reply' };
          const err = first.err;
          if (err instanceof BusRemoteError) throw err; // refused: nothing was touched, no report comes
          // The reply is lost, or never comes: the refit may have run, or run on, elsewhere.
          const journal = await fromJournal();
          if (journal) return journal;
          if (err instanceof BusTimeout) throw new BusTimeout(request, timeoutMs);
          if (err instanceof BusNoResponders) {
            if (!sent) throw err;
            // The refit may be queued already: its report can still come; ask again meanwhile.
            await waitFor(new Promise((resolve) => setTimeout(resolve, NO_RESPONDERS_RETRY_MS).unref()));
            continue;
          }
          if (err instanceof BusUnavailable) {
            // It may have reached a gateway: the same id again is the same refit, never a second one.
            sent = true;
            log(`${err.message}; sending refit ${refitId} again once NATS is back`);
            await waitFor(connectedAgain(bus));
            continue;
          }
          throw err;
        }
      } finally {
        clearTimeout(timer);
      }
    },

    async close() {
      if (closed) return;
      closed = true;
      clearTimeout(pollTimer);
      // The reply may overtake the refit's last events: let the ones already on their way land.
      if (bus.connected) await bus.nc.flush().catch(() => {});
      await new Promise((resolve) => setImmediate(resolve));
      events.unsubscribe();
      reports.unsubscribe();
    },
  };
}

/** Resolves once the connection is up (at once if it is). */
function connectedAgain(bus: Bus): Promise<void> {
  if (bus.connected) return Promise.resolve();
  return new Promise((resolve) => {
    const off = bus.onStatus((s) => {
      if (!s.connected) return;
      off();
      resolve();
    });
  });
}
