// SMG's `prefix_hash`, a lighter cache affinity than cache_aware's tree: the hash of the prompt's
// first `prefix_token_count` tokens (characters, for a text prompt) picks an engine on the hash
// ring, so prompts sharing that prefix share an engine. An engine over the load bound, more than
// `load_factor` times the average in flight (the incoming request counted), gives the request to
// the least loaded engine within the bound, or keeps it when every engine is over. (SMG names that
// branch a walk, but takes the least loaded, not the ring's next engine.) A request without a prompt
// goes to the least loaded engine: SMG would route it nowhere.

import { RingCache } from './hash-ring.ts';
import { leastLoaded } from './least-loaded.ts';
import type { Candidate, Decision, PolicyRequest, RoutingPolicy } from './policy.ts';

export interface PrefixHashSettings {
  prefixTokenCount: number;
  loadFactor: number;
}

export class PrefixHashPolicy implements RoutingPolicy {
  readonly name = 'prefix_hash';
  readonly needsPrompt = true;
  private readonly rings = new RingCache();

  constructor(private readonly settings: PrefixHashSettings) {}

  pick<W extends Candidate>(req: PolicyRequest<W>): Decision<W> {
    const { candidates, inFlight } = req;
    const key = this.prefixKey(req);
    if (key === undefined) return { worker: leastLoaded(candidates, inFlight), reason: 'min_load' };
    const home = this.rings.lookup(candidates, key);
    let total = 0;
    for (const c of candidates) total += inFlight(c.id);
    const bound = ((total + 1) / candidates.length) * this.settings.loadFactor;
    const fits = (load: number) => total === 0 || load <= bound;
    if (fits(inFlight(home.id))) return { worker: home, reason: 'prefix_hash' };
    let best: W | undefined;
    let bestLoad = Number.POSITIVE_INFINITY;
    for (const c of candidates) {
      const load = inFlight(c.id);
      if (fits(load) && load < bestLoad) {
        best = c;
        bestLoad = load;
      }
    }
    return { worker: best ?? home, reason: 'overload' };
  }

  /** The ring key of the prompt's prefix; undefined without a prompt. */
  private prefixKey(req: PolicyRequest<Candidate>): string | undefined {
    const n = this.settings.prefixTokenCount;
    if (req.tokens !== undefined && req.tokens.length > 0) return `t:${req.tokens.slice(0, n).join(',')}`;
    if (req.text !== undefined && req.text.length > 0) return `s:${req.text.slice(0, n)}`;
    return undefined;
  }
}
