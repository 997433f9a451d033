// The routing settings (gateway/config.ts, docs/routing.md): SMG's CLI defaults but rlgate's own
// default policy; SMG's flag names through flags (and the Rust CLI's `--eviction-interval`), the
// environment and a config file (flat snake_case, or under `routing`); every bad value a startup
// error naming its flag, each policy's settings checked only when a configured policy uses them,
// as SMG does; bucket for prefill only.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, defaultConfig, helpText, loadConfig } from '../../src/gateway/config.ts';

const dir = mkdtempSync(join(tmpdir(), 'rlgate-routing-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
function configFile(content: unknown): string {
  const path = join(dir, `config-${files++}.json`);
  writeFileSync(path, JSON.stringify(content));
  return path;
}

function startupError(argv: string[], env: NodeJS.ProcessEnv = {}): string {
  try {
    loadConfig(argv, env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error(`expected a startup error for ${argv.join(' ')}`);
}

describe('defaults', () => {
  it("SMG's CLI defaults (router_args.py); the policy is rlgate's bounded_affinity", () => {
    expect(defaultConfig().routing).toEqual({
      policy: 'bounded_affinity',
      prefillPolicy: undefined,
      decodePolicy: undefined,
      cacheThreshold: 0.3,
      balanceAbsThreshold: 64,
      balanceRelThreshold: 1.5,
      evictionIntervalSecs: 60,
      maxTreeSize: 67_108_864,
      prefixTokenCount: 256,
      prefixHashLoadFactor: 1.25,
      maxIdleSecs: 14_400,
      assignmentMode: 'random',
      routingKeyOverride: false,
    });
    expect(loadConfig([], {}).routing).toEqual(defaultConfig().routing);
  });
});

describe('where the settings come from', () => {
  it('flags, with the Rust CLI spelling --eviction-interval too', () => {
    const r = loadConfig(
      [
        '--policy',
        'cache_aware',
        '--cache-threshold',
        '0.5',
        '--balance-abs-threshold=32',
        '--balance-rel-threshold',
        '1.1',
        '--eviction-interval',
        '30',
        '--max-tree-size',
        '10000',
        '--prefill-policy',
        'bucket',
        '--decode-policy',
        'power_of_two',
        '--routing-key-override',
        '--assignment-mode',
        'min_group',
      ],
      {},
    ).routing;
    expect(r).toMatchObject({
      policy: 'cache_aware',
      cacheThreshold: 0.5,
      balanceAbsThreshold: 32,
      balanceRelThreshold: 1.1,
      evictionIntervalSecs: 30,
      maxTreeSize: 10_000,
      prefillPolicy: 'bucket',
      decodePolicy: 'power_of_two',
      routingKeyOverride: true,
      assignmentMode: 'min_group',
    });
  });

  it('the environment, and a config file by snake_case names, flat or under routing', () => {
    expect(loadConfig([], { RLGATE_POLICY: 'prefix_hash', RLGATE_PREFIX_HASH_LOAD_FACTOR: '2.5' }).routing).toMatchObject({
      policy: 'prefix_hash',
      prefixHashLoadFactor: 2.5,
    });
    const flat = configFile({ policy: 'manual', max_idle_secs: 60, cache_threshold: 0.9 });
    expect(loadConfig(['--config', flat], {}).routing).toMatchObject({ policy: 'manual', maxIdleSecs: 60, cacheThreshold: 0.9 });
    const nested = configFile({ routing: { policy: 'cache_aware', balance_rel_threshold: '2', cacheThreshold: 0.4 } });
    expect(loadConfig(['--config', nested], {}).routing).toMatchObject({ policy: 'cache_aware', balanceRelThreshold: 2, cacheThreshold: 0.4 });
    expect(() => loadConfig(['--config', configFile({ cache_threshold: true })], {})).toThrow(/cache_threshold must be a number/);
  });

  it('--help lists every routing flag with its environment variable', () => {
    const help = helpText();
    for (const flag of ['policy', 'prefill-policy', 'decode-policy', 'cache-threshold', 'balance-abs-threshold', 'balance-rel-threshold', 'max-tree-size']) {
      expect(help).toContain(`--${flag} `);
      expect(help).toContain(`RLGATE_${flag.toUpperCase().replace(/-/g, '_')}`);
    }
    expect(help).toContain('--eviction-interval-secs V');
    expect(help).toContain('(also --eviction-interval)');
  });
});

describe('startup errors name the flag', () => {
  it('policy names: SMG’s choices, bounded_affinity and least_inflight; bucket only for prefill', () => {
    expect(startupError(['--policy', 'fastest'])).toMatch(/^--policy must be one of bounded_affinity, least_inflight, cache_aware, .*; got `fastest`$/);
    expect(startupError(['--policy', 'bucket'])).toBe('--policy bucket: bucket is a prefill policy; give it as --prefill-policy');
    expect(startupError(['--decode-policy', 'bucket'])).toBe('--decode-policy bucket: Decode policy should not be allowed to be bucket');
    expect(startupError(['--prefill-policy', 'nope'])).toMatch(/^--prefill-policy must be one of .*bucket; got `nope`$/);
    expect(startupError(['--assignment-mode', 'fair'])).toBe('--assignment-mode must be one of random, min_load, min_group; got `fair`');
    expect(loadConfig(['--prefill-policy', 'bucket'], {}).routing.prefillPolicy).toBe('bucket');
  });

  it('values of the wrong kind', () => {
    expect(startupError(['--cache-threshold', 'half'])).toBe('--cache-threshold must be a number, got `half`');
    expect(startupError(['--cache-threshold', '1e999'])).toBe('--cache-threshold must be a number, got `1e999`');
    expect(startupError(['--max-tree-size', '1.5'])).toBe('--max-tree-size must be an integer, got `1.5`');
    expect(startupError([], { RLGATE_BALANCE_REL_THRESHOLD: 'x' })).toBe('environment variable RLGATE_BALANCE_REL_THRESHOLD must be a number, got `x`');
    expect(startupError(['--balance-abs-threshold', '-1'])).toBe('--balance-abs-threshold must be >= 0, got `-1`');
    expect(startupError(['--max-idle-secs', '-5'])).toBe('--max-idle-secs must be >= 0, got `-5`');
  });

  it('cache_aware’s settings, checked when a configured policy is cache_aware (SMG’s ranges)', () => {
    const ca = ['--policy', 'cache_aware'];
    expect(startupError([...ca, '--cache-threshold', '1.5'])).toBe('--cache-threshold must be between 0.0 and 1.0, got `1.5`');
    expect(startupError([...ca, '--cache-threshold', '-0.1'])).toBe('--cache-threshold must be between 0.0 and 1.0, got `-0.1`');
    expect(startupError([...ca, '--balance-rel-threshold', '0.9'])).toBe('--balance-rel-threshold must be >= 1.0, got `0.9`');
    expect(startupError([...ca, '--eviction-interval-secs', '0'])).toBe('--eviction-interval-secs must be > 0 with cache_aware, got `0`');
    expect(startupError([...ca, '--max-tree-size', '0'])).toBe('--max-tree-size must be > 0, got `0`');
    expect(startupError(['--decode-policy', 'cache_aware', '--cache-threshold', '2'])).toMatch(/^--cache-threshold must be between/);
    // Unused, as SMG leaves them.
    expect(loadConfig(['--policy', 'round_robin', '--cache-threshold', '2', '--eviction-interval-secs', '0'], {}).routing.cacheThreshold).toBe(2);
    expect(startupError(['--prefill-policy', 'bucket', '--balance-rel-threshold', '0.5'])).toBe('--balance-rel-threshold must be >= 1.0, got `0.5`');
  });

  it('prefix_hash’s settings, checked with prefix_hash', () => {
    const ph = ['--policy', 'prefix_hash'];
    expect(startupError([...ph, '--prefix-token-count', '0'])).toBe('--prefix-token-count must be > 0, got `0`');
    expect(startupError([...ph, '--prefix-hash-load-factor', '0.99'])).toBe('--prefix-hash-load-factor must be >= 1.0, got `0.99`');
    expect(loadConfig(['--prefix-token-count', '0'], {}).routing.prefixTokenCount).toBe(0);
  });
});
