// The staleness bound on requests in flight: a `/generate` admitted under `max-staleness:k` is
// watched until it ends, and once its model's fleet maximum has moved more than k versions past the
// version its engine held when it was admitted (refits of other engines, or of its own, while it
// ran), it is handed to its `onStale` (the relay aborts it or marks it, as the request asked) and
// counted. Looked at only when the engines' table changed, and only while such requests run: a
// fleet without them pays nothing.

import { randomUUID } from 'node:crypto';
import { GatewayError } from '../api/errors.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import { staleInFlight, type VersionPolicy } from '../fleet/version-policy.ts';
import type { Metrics } from '../obs/metrics.ts';

/** How often the table's generation is compared while bounded requests run. */
const LOOK_MS = 50;

/** What a request does when it goes stale: cut off (the default), or finish and say so. */
export type StaleAction = 'abort' | 'mark';

export interface StaleWatch {
  modelId: string;
  /** The engine's version when the request was admitted. */
  admitted: string;
  policy: VersionPolicy;
  action: StaleAction;
  /** Called once, with the fleet maximum that made the request stale. */
  onStale: (fleetMax: string) => void;
}

export class StaleGuard {
  private readonly running = new Set<StaleWatch>();
  private timer: NodeJS.Timeout | undefined;
  private seen = -1;

  constructor(
    private readonly deps: {
      view: Pick<FleetView, 'fleetMax'>;
      /** Moves whenever an engine's version (or anything of the routing table) changes. */
      generation: () => number;
      metrics: Pick<Metrics, 'staleRequest'>;
    },
  ) {}

  /** Watches one request until the returned function is called (when it ends, however it ends). */
  watch(w: StaleWatch): () => void {
    this.running.add(w);
    if (!this.timer) {
      this.seen = this.deps.generation();
      this.timer = setInterval(() => this.look(), LOOK_MS);
      this.timer.unref();
    }
    return () => {
      this.running.delete(w);
      if (this.running.size === 0) this.stop();
    };
  }

  /** Running requests watched now (for the tests and the metrics). */
  get size(): number {
    return this.running.size;
  }

  close(): void {
    this.running.clear();
    this.stop();
  }

  private stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private look(): void {
    const g = this.deps.generation();
    if (g === this.seen) return;
    this.seen = g;
    const maxOf = new Map<string, string | undefined>();
    for (const w of [...this.running]) {
      if (!maxOf.has(w.modelId)) maxOf.set(w.modelId, this.deps.view.fleetMax(w.modelId));
      const max = maxOf.get(w.modelId);
      if (!staleInFlight(w.policy, w.admitted, max)) continue;
      this.running.delete(w);
      this.deps.metrics.staleRequest(w.action === 'abort' ? 'aborted' : 'marked');
      w.onStale(max!);
    }
    if (this.running.size === 0) this.stop();
  }
}

/** The request header that says what a stale request gets: `abort` (the default) or `mark`. */
export const ON_STALE_HEADER = 'x-rl-on-stale';

/** The header's value, checked; undefined when absent. Throws on anything but `abort` or `mark`. */
export function staleActionOf(value: string | string[] | undefined): StaleAction | undefined {
  if (value === undefined) return undefined;
  const v = (Array.isArray(value) ? value.join(',') : value).trim();
  if (v === 'abort' || v === 'mark') return v;
  throw new GatewayError('invalid_request', `\`${ON_STALE_HEADER}\` must be \`abort\` or \`mark\`, got ${JSON.stringify(v)}`, { field: ON_STALE_HEADER });
}

/**
 * The rid an HTTP engine can be asked to abort the request by, and the body to send: the caller's
 * own rid, or one the gateway adds. Undefined when the request names a rid that is not one string
 * (a batch's list, null): it cannot be aborted by rid, so it is not bounded in flight.
 */
export function abortableBody(rid: unknown, body: Buffer | null): { rid: string; body: Buffer | null } | undefined {
  if (typeof rid === 'string') return { rid, body };
  if (rid !== undefined) return undefined;
  const added = `rlgate-${randomUUID()}`;
  return { rid: added, body: body && withRid(body, added) };
}

/**
 * `{"rid": …}` spliced in front of a JSON object's first member, so that the engine can be asked to
 * abort exactly this request: the caller's bytes are otherwise sent as they came.
 */
export function withRid(body: Buffer, rid: string): Buffer {
  let i = 0;
  while (i < body.length && (body[i] === 0x20 || body[i] === 0x0a || body[i] === 0x0d || body[i] === 0x09)) i++;
  let j = i + 1;
  while (j < body.length && (body[j] === 0x20 || body[j] === 0x0a || body[j] === 0x0d || body[j] === 0x09)) j++;
  const empty = body[j] === 0x7d; // `{}`
  return Buffer.concat([Buffer.from(`{"rid":${JSON.stringify(rid)}${empty ? '' : ','}`), body.subarray(i + 1)]);
}
