// The policies by name, as `--policy`, `--prefill-policy` and `--decode-policy` take them: SMG's
// names (its CLI's choices), rlgate's own default, and the one policy built from the settings.

import { BOUNDED_AFFINITY_DEFAULTS, BoundedAffinityPolicy } from './bounded-affinity.ts';
import { CacheAwarePolicy } from './cache-aware.ts';
import { ConsistentHashingPolicy } from './consistent-hashing.ts';
import type { KvEventIndex } from './kv-event-index.ts';
import { LeastInflightPolicy } from './least-inflight.ts';
import { LeastLoadPolicy } from './least-load.ts';
import { type AssignmentMode, ManualPolicy } from './manual.ts';
import { PassthroughPolicy } from './passthrough.ts';
import type { Clock, RandomSource, RoutingPolicy } from './policy.ts';
import { PowerOfTwoPolicy } from './power-of-two.ts';
import { PrefixHashPolicy } from './prefix-hash.ts';
import { RandomPolicy } from './random.ts';
import { RoundRobinPolicy } from './round-robin.ts';
import { withRoutingKeyOverride } from './routing-key-override.ts';

/** rlgate's default: the longest prefix within a load bound counted in tokens of work (bounded-affinity.ts). */
export const DEFAULT_POLICY = 'bounded_affinity';

/** What `--policy` takes: SMG's choices (`router_args.py`), rlgate's default and its routing before it. */
export const POLICY_NAMES = [
  DEFAULT_POLICY,
  'least_inflight',
  'cache_aware',
  'round_robin',
  'random',
  'power_of_two',
  'least_load',
  'consistent_hashing',
  'prefix_hash',
  'manual',
  'passthrough',
] as const;

/** `--prefill-policy` also takes SMG's `bucket`, a prefill-only policy; `--decode-policy` does not (SMG refuses a bucket decode). */
export const PREFILL_POLICY_NAMES = [...POLICY_NAMES, 'bucket'] as const;
export const DECODE_POLICY_NAMES = POLICY_NAMES;

export type PolicyName = (typeof POLICY_NAMES)[number];

/** The settings the policies are built from (GatewayConfig's `routing`). */
export interface PolicySettings {
  policy: string;
  cacheThreshold: number;
  balanceAbsThreshold: number;
  balanceRelThreshold: number;
  evictionIntervalSecs: number;
  maxTreeSize: number;
  prefixTokenCount: number;
  prefixHashLoadFactor: number;
  maxIdleSecs: number;
  assignmentMode: string;
  routingKeyOverride: boolean;
}

export interface PolicyDeps {
  clock: Clock;
  random: RandomSource;
  /** The engines' KV events (fleet/kv-index.ts), for the policies that read them. */
  kvIndex?: KvEventIndex;
}

/** The policies that consult the engines' KV events: only for them are the streams worth opening. */
const KV_EVENT_POLICIES: ReadonlySet<string> = new Set<PolicyName>(['bounded_affinity', 'cache_aware']);

/** Whether `--policy` reads a KV-event index. */
export function readsKvEvents(policy: string): boolean {
  return KV_EVENT_POLICIES.has(policy);
}

/** The data plane's policy for `settings.policy` (a name POLICY_NAMES holds, checked at startup). */
export function createPolicy(settings: PolicySettings, deps: PolicyDeps): RoutingPolicy {
  const policy = byName(settings.policy as PolicyName, settings, deps);
  return settings.routingKeyOverride ? withRoutingKeyOverride(policy, manualOf(settings, deps)) : policy;
}

function byName(name: PolicyName, s: PolicySettings, deps: PolicyDeps): RoutingPolicy {
  switch (name) {
    case 'bounded_affinity':
      return new BoundedAffinityPolicy(BOUNDED_AFFINITY_DEFAULTS, deps);
    case 'least_inflight':
      return new LeastInflightPolicy();
    case 'cache_aware':
      return new CacheAwarePolicy(s, deps);
    case 'round_robin':
      return new RoundRobinPolicy();
    case 'random':
      return new RandomPolicy(deps.random);
    case 'power_of_two':
      return new PowerOfTwoPolicy(deps.random);
    case 'least_load':
      return new LeastLoadPolicy();
    case 'consistent_hashing':
      return new ConsistentHashingPolicy(deps.random);
    case 'prefix_hash':
      return new PrefixHashPolicy({ prefixTokenCount: s.prefixTokenCount, loadFactor: s.prefixHashLoadFactor });
    case 'manual':
      return manualOf(s, deps);
    case 'passthrough':
      return new PassthroughPolicy();
    default:
      throw new Error(`unknown routing policy \`${String(name)}\``);
  }
}

function manualOf(s: PolicySettings, deps: PolicyDeps): ManualPolicy {
  return new ManualPolicy(
    { evictionIntervalSecs: s.evictionIntervalSecs, maxIdleSecs: s.maxIdleSecs, assignmentMode: s.assignmentMode as AssignmentMode },
    { clock: deps.clock, random: deps.random },
  );
}
