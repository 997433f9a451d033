// The trainer's refit over NATS, as a trainer should do it: one refit id for the whole refit,
// chosen before anything is sent; its report and events subscribed first; the plan and the refit
// asked on `<root>.refit.request`; and the report taken from whichever comes first, the reply, the
// `report` event, `<root>.refit.<id>.report` or the refit's journal (KV), through the bus's
// refit-report wait, which `rlgate refit` shares. When the connection to NATS drops under the
// request, the same request (same id, so the same refit: the gateway de-duplicates it) is sent
// again after the reconnect. It never publishes on the refit queue itself and never runs a refit
// twice.

import { randomUUID } from 'node:crypto';
import type { NatsAuthSettings } from '../../bus/connect-options.ts';
import { natsConnectOptions } from '../../bus/connect-options.ts';
import { BusNoResponders, BusRemoteError, BusTimeout, BusUnavailable, connectBus, type Bus } from '../../bus/connection.ts';
import { watchRefitReport } from '../../bus/refit-report.ts';
import { DEFAULT_ROOT, subjects } from '../../bus/subjects.ts';
import { runRefit, TrainerError, type DistributedRefitResult, type RefitOptions } from './refit.ts';

export interface NatsRefitOptions extends RefitOptions {
  /** Server list (comma-separated) and credentials, as the other rlgate commands take them. */
  nats: { url: string; auth?: Partial<NatsAuthSettings> };
  /** The gateways' `--subject-root`; default `rl`. */
  subjectRoot?: string;
  /** The whole refit, from connecting to the report; default 900 s. */
  timeoutMs?: number;
  /** Longest wait for the plan's answer; default 30 s (within `timeoutMs`). */
  planTimeoutMs?: number;
  /** How often the refit's journal is read while waiting; default 500 ms. */
  pollMs?: number;
  /** Debug lines (where the report came from, reconnects, a journal that cannot be read). */
  log?: (line: string) => void;
}

export interface NatsRefitResult extends DistributedRefitResult {
  refitId: string;
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

  try {
    // The report's subjects (and the events, for a progress view) first, so that a report
    // published at any moment after the first request is seen; the journal is read while the
    // refit is asked (src/bus/refit-report.ts, shared with `rlgate refit`).
    const watch = await watchRefitReport(bus, {
      root,
      refitId,
      weightVersion: opts.version,
      log,
      ...(opts.onEvent ? { onEvent: opts.onEvent } : {}),
      ...(opts.pollMs === undefined ? {} : { pollMs: opts.pollMs }),
    });
    try {
      return {
        refitId,
        ...(await runRefit(
          { ...opts, refitId },
          {
            async worldSize(planBody) {
              for (;;) {
                try {
                  const answer = await bus.request<{ plan?: { world_size?: unknown } }>(
                    request,
                    planBody,
                    Math.max(1, Math.min(opts.planTimeoutMs ?? 30_000, left())),
                  );
                  const ws = answer?.plan?.world_size;
                  if (typeof ws !== 'number')
                    throw new TrainerError('plan_failed', `the refit plan on ${request} has no world_size: ${JSON.stringify(answer).slice(0, 300)}`);
                  return ws;
                } catch (err) {
                  if (err instanceof BusRemoteError)
                    throw new TrainerError('plan_failed', `the gateway refused the refit plan: ${err.code}: ${err.message}`, undefined, err.code);
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
              try {
                const answer = await watch.ask(body, Math.max(0, left()));
                return { status: answer.status, report: answer.report, from: answer.from };
              } catch (err) {
                if (err instanceof BusRemoteError) {
                  throw new TrainerError('refit_refused', `the gateway refused refit ${refitId}: ${err.code}: ${err.message}`, undefined, err.code);
                }
                if (err instanceof BusNoResponders) throw noGateway(request);
                if (err instanceof BusTimeout) throw noReport(refitId, timeoutMs);
                throw err;
              }
            },
          },
        )),
      };
    } finally {
      await watch.close();
    }
  } finally {
    over = true;
    await bus.close();
  }
}

function noGateway(request: string): TrainerError {
  return new TrainerError('no_gateway', `no gateway answers on ${request} (no replica with RL on is connected to this NATS server with this subject root)`);
}

function noReport(refitId: string, timeoutMs: number): TrainerError {
  return new TrainerError(
    'no_report',
    `no report for refit ${refitId} within ${Math.round(timeoutMs / 1000)} s; it may still run: its report will be on GET /v1/rl/refits/${refitId} of any replica`,
  );
}
