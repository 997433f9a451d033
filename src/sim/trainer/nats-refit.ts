// The trainer's refit over NATS, as a trainer should do it: one refit id for the whole refit,
// chosen before anything is sent; its report subject subscribed first; the plan and the refit
// asked on `<root>.refit.request`; and the report taken from whichever comes first, the reply or
// `<root>.refit.<id>.report`, with the refit's journal (KV) read every second in case both were
// missed. When the connection to NATS drops under the request, the same request (same id, so the
// same refit: the gateway de-duplicates it) is sent again after the reconnect. It never publishes
// on the refit queue itself and never runs a refit twice.

import { randomUUID } from 'node:crypto';
import { Kvm, type KV } from '@nats-io/kv';
import { bucketName, JsonBucket } from '../../bus/buckets.ts';
import type { NatsAuthSettings } from '../../bus/connect-options.ts';
import { natsConnectOptions } from '../../bus/connect-options.ts';
import { BusNoResponders, BusRemoteError, BusTimeout, BusUnavailable, connectBus, type Bus } from '../../bus/connection.ts';
import { DEFAULT_ROOT, subjects } from '../../bus/subjects.ts';
import { runRefit, TrainerError, type DistributedRefitResult, type RefitBody, type RefitOptions, type ReportOrigin } from './refit.ts';

export interface NatsRefitOptions extends RefitOptions {
  /** Server list (comma-separated) and credentials, as the other rlgate commands take them. */
  nats: { url: string; auth?: Partial<NatsAuthSettings> };
  /** The gateways' `--subject-root`; default `rl`. */
  subjectRoot?: string;
  /** The whole refit, from connecting to the report; default 900 s. */
  timeoutMs?: number;
  /** Longest wait for the plan's answer; default 30 s (within `timeoutMs`). */
  planTimeoutMs?: number;
  /** How often the refit's journal is read while waiting; default 1 s. */
  pollMs?: number;
  /** Debug lines (where the report came from, reconnects, a journal that cannot be read). */
  log?: (line: string) => void;
}

export interface NatsRefitResult extends DistributedRefitResult {
  refitId: string;
}

/** A report as the gateway writes it: only what the trainer reads. */
interface ReportShape {
  failed?: unknown[];
}

/** The journal in the `refits` bucket: `report` once `status` is `done`. */
interface JournalShape {
  status?: string;
  report?: unknown;
}

/** The status the HTTP API would give this report: 200 only when no engine failed. */
function statusOf(report: unknown): 200 | 207 {
  const failed = (report as ReportShape | null)?.failed;
  return Array.isArray(failed) && failed.length === 0 ? 200 : 207;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export async function runNatsRefit(opts: NatsRefitOptions): Promise<NatsRefitResult> {
  const root = opts.subjectRoot ?? DEFAULT_ROOT;
  const subj = subjects(root);
  const refitId = opts.refitId ?? randomUUID();
  subj.refitReport(refitId); // validates the id as a subject token before anything is sent
  const timeoutMs = opts.timeoutMs ?? 900_000;
  const deadline = Date.now() + timeoutMs;
  const left = () => deadline - Date.now();
  const log = opts.log ?? (() => {});
  const request = subj.refitRequest();

  let bus: Bus;
  try {
    bus = await connectBus({
      ...natsConnectOptions(opts.nats.url, opts.nats.auth ?? {}),
      name: 'rlgate-trainer',
      timeoutMs: Math.max(1, Math.min(5_000, left())),
      onHandlerError: (err, subject) => log(`bus handler on ${subject} failed: ${(err as Error)?.message ?? err}`),
    });
  } catch (err) {
    if ((err as Error)?.name === 'NatsSettingsError') throw err;
    throw new TrainerError('no_gateway', (err as Error)?.message ?? String(err));
  }
  let over = false; // the refit has its report (or was given up): stop every wait
  const waitConnected = async () => {
    while (!bus.connected && !over && left() > 0) await sleep(100);
  };

  // The report subject first, so that a report published at any moment after the request is seen.
  let gotReport!: (r: { report: unknown; from: ReportOrigin }) => void;
  const reported = new Promise<{ report: unknown; from: ReportOrigin }>((resolve) => (gotReport = resolve));
  const sub = bus.subscribe(subj.refitReport(refitId), (data) => gotReport({ report: data, from: 'report_subject' }));
  // Its events too, for a progress view: subscribed now, so that the first one is seen.
  const onEvent = opts.onEvent;
  const events = onEvent ? bus.subscribe(subj.refitEvents(refitId), (data) => onEvent(data)) : undefined;

  // The journal: the authoritative copy, there even when the publish was missed (a drop of our
  // connection) or never made (the runner died between its journal write and the publish).
  const pollJournal = async () => {
    let kv: KV | undefined;
    while (!over) {
      await sleep(opts.pollMs ?? 1_000);
      if (over || !bus.connected) continue;
      try {
        kv ??= await new Kvm(bus.nc).open(bucketName(root, 'refits'));
        const entry = await new JsonBucket<JournalShape>(kv).get(refitId);
        if (entry?.value.status === 'done' && entry.value.report !== undefined) gotReport({ report: entry.value.report, from: 'journal' });
      } catch (err) {
        const text = `${(err as Error)?.message ?? err} ${((err as Error)?.cause as Error | undefined)?.message ?? ''}`;
        if (/permission/i.test(text)) {
          log(`the refits bucket cannot be read with these credentials (${text.trim()}); waiting for the reply and ${subj.refitReport(refitId)} only`);
          return;
        }
        kv = undefined; // not there yet, or NATS was away: open it again next time
      }
    }
  };

  try {
    await bus.nc.flush(); // the subscription is in place on the server before anything is sent
    return {
      refitId,
      ...(await runRefit({ ...opts, refitId }, {
        async worldSize(planBody) {
          for (;;) {
            try {
              const answer = await bus.request<{ plan?: { world_size?: unknown } }>(request, planBody, Math.max(1, Math.min(opts.planTimeoutMs ?? 30_000, left())));
              const ws = answer?.plan?.world_size;
              if (typeof ws !== 'number') throw new TrainerError('plan_failed', `the refit plan on ${request} has no world_size: ${JSON.stringify(answer).slice(0, 300)}`);
              return ws;
            } catch (err) {
              if (err instanceof BusRemoteError) throw new TrainerError('plan_failed', `the gateway refused the refit plan: ${err.code}: ${err.message}`, undefined, err.code);
              if (err instanceof BusNoResponders) throw noGateway(request);
              if (err instanceof BusTimeout) throw new TrainerError('no_gateway', `no answer to the refit plan on ${request} within ${err.timeoutMs} ms`);
              // A plan changes nothing: asking again after the reconnect is harmless.
              if (err instanceof BusUnavailable && left() > 0) {
                log(`${err.message}; asking for the plan again once NATS is back`);
                await waitConnected();
                continue;
              }
              throw err;
            }
          }
        },
        async refit(body) {
          void pollJournal();
          const replied = sendRefit(body);
          replied.catch(() => {}); // the report may come first; then this settles unheard
          let timer: NodeJS.Timeout | undefined;
          const expired = new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(noReport(refitId, timeoutMs)), Math.max(0, left()));
          });
          try {
            return await Promise.race([replied, expired, reported.then((r) => ({ status: statusOf(r.report), ...r }))]);
          } finally {
            over = true;
            clearTimeout(timer);
          }
        },
      })),
    };
  } finally {
    over = true;
    sub.unsubscribe();
    // The reply may overtake the refit's last events: the ones already on their way land first.
    if (events && bus.connected) await bus.nc.flush().catch(() => {});
    events?.unsubscribe();
    await bus.close();
  }

  /** The refit request, sent again with the same id after a lost connection, until a reply or the end. */
  async function sendRefit(body: RefitBody): Promise<{ status: number; report: unknown; from: ReportOrigin }> {
    let sent = false; // some earlier attempt may have reached a gateway
    for (;;) {
      if (over) throw noReport(refitId, timeoutMs);
      if (left() <= 0) throw noReport(refitId, timeoutMs);
      try {
        const answer = await bus.request<{ status: number; report: unknown }>(request, body, left());
        return { status: answer.status, report: answer.report, from: 'reply' };
      } catch (err) {
        if (over) throw err;
        if (err instanceof BusRemoteError) {
          throw new TrainerError('refit_refused', `the gateway refused refit ${refitId}: ${err.code}: ${err.message}`, undefined, err.code);
        }
        if (err instanceof BusTimeout) throw noReport(refitId, timeoutMs);
        if (err instanceof BusNoResponders) {
          if (!sent) throw noGateway(request);
          // The refit may be queued already: its report can still come; ask again meanwhile.
          await sleep(1_000);
          continue;
        }
        if (err instanceof BusUnavailable) {
          // It may have reached a gateway: the same id again is the same refit, never a second one.
          sent = true;
          log(`${err.message}; sending refit ${refitId} again once NATS is back`);
          await waitConnected();
          continue;
        }
        throw err;
      }
    }
  }
}

function noGateway(request: string): TrainerError {
  return new TrainerError('no_gateway', `no gateway answers on ${request} (no replica with RL on is connected to this NATS server with this subject root)`);
}

function noReport(refitId: string, timeoutMs: number): TrainerError {
  return new TrainerError('no_report',
    `no report for refit ${refitId} within ${Math.round(timeoutMs / 1000)} s; it may still run: its report will be on GET /v1/rl/refits/${refitId} of any replica`);
}
