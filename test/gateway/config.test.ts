// Gateway settings: SMG's defaults, its three startup errors with their exact texts (the version
// policy checked even with RL off, the two counts only with RL on), and the same rules reached
// through flags, environment variables and a JSON config file.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { GatewayConfig } from '../../src/config/gateway-config.ts';
import { ConfigError, defaultConfig, loadConfig, validateConfig } from '../../src/gateway/config.ts';

const POLICY_NEEDS_RL = 'rl.version_policy requires rl.enabled';
const TIMEOUT_MIN = 'rl.control_timeout_secs must be >= 1';
const FANOUT_MIN = 'rl.fanout_concurrency must be >= 1';

function withRl(rl: Partial<GatewayConfig['rl']>, rest: Partial<GatewayConfig> = {}): GatewayConfig {
  const base = defaultConfig();
  return { ...base, ...rest, rl: { ...base.rl, ...rl } };
}

/** The ConfigError a thunk throws (fails the test when it throws nothing or something else). */
function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError, nothing was thrown');
}

const dir = mkdtempSync(join(tmpdir(), 'rlgate-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
function configFile(content: unknown): string {
  const path = join(dir, `config-${files++}.json`);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

describe('defaults', () => {
  it('RL off, control timeout 600 s, fan-out concurrency 32, version policy any', () => {
    const cfg = defaultConfig();
    expect(cfg.rl).toEqual({ enabled: false, controlTimeoutSecs: 600, fanoutConcurrency: undefined, versionPolicy: 'any' });
    expect(cfg.host).toBe('127.0.0.1');
    expect(validateConfig(cfg)).toEqual(cfg);
  });

  it('missing fields take their defaults (flags, config file)', () => {
    expect(loadConfig([], {}).rl).toEqual(defaultConfig().rl);
    expect(loadConfig(['--enable-rl'], {}).rl).toEqual({ ...defaultConfig().rl, enabled: true });
    const file = configFile({ rl: { enabled: true } });
    expect(loadConfig(['--config', file], {}).rl).toEqual({ ...defaultConfig().rl, enabled: true });
  });
});

describe('startup errors', () => {
  it('RL off with any version policy other than `any` → `rl.version_policy requires rl.enabled`', () => {
    for (const policy of ['latest-only', 'min-version:3', 'max-staleness:1', 'garbage', '']) {
      expect(configError(() => validateConfig(withRl({ enabled: false, versionPolicy: policy }))).message, policy).toBe(POLICY_NEEDS_RL);
    }
    expect(() => validateConfig(withRl({ enabled: false, versionPolicy: 'any' }))).not.toThrow();
  });

  it('RL off: the control timeout and fan-out concurrency are not checked', () => {
    expect(() => validateConfig(withRl({ enabled: false, controlTimeoutSecs: 0, fanoutConcurrency: 0 }))).not.toThrow();
  });

  it('RL on: control_timeout_secs = 0 → `rl.control_timeout_secs must be >= 1`', () => {
    for (const v of [0, -1, 0.5, Number.NaN]) {
      expect(configError(() => validateConfig(withRl({ enabled: true, controlTimeoutSecs: v }))).message, String(v)).toBe(TIMEOUT_MIN);
    }
    expect(validateConfig(withRl({ enabled: true, controlTimeoutSecs: 1 })).rl.controlTimeoutSecs).toBe(1);
  });

  it('RL on: fanout_concurrency = 0 → `rl.fanout_concurrency must be >= 1`', () => {
    for (const v of [0, -3, Number.NaN]) {
      expect(configError(() => validateConfig(withRl({ enabled: true, fanoutConcurrency: v }))).message, String(v)).toBe(FANOUT_MIN);
    }
    expect(validateConfig(withRl({ enabled: true, fanoutConcurrency: 1 })).rl.fanoutConcurrency).toBe(1);
  });

  it('RL on: the version policy follows the policy grammar', () => {
    for (const ok of ['any', 'latest-only', 'min-version:3', 'min-version:step-9', 'max-staleness:0', 'max-staleness:12']) {
      expect(() => validateConfig(withRl({ enabled: true, versionPolicy: ok })), ok).not.toThrow();
    }
    for (const bad of ['', 'Any', 'latest', 'newest', 'freshest', 'min-version:', 'min-version:a b', 'max-staleness:x', 'max-staleness:-1', 'max-staleness:']) {
      configError(() => validateConfig(withRl({ enabled: true, versionPolicy: bad })));
    }
  });
});

describe('upper bounds: a deadline no Node timer can hold is refused at startup', () => {
  it('request_timeout_secs and rl.control_timeout_secs above 2147483 s are errors; at the bound they are accepted', () => {
    expect(configError(() => loadConfig(['--request-timeout-secs', '2147484'], {})).message).toMatch(/^request_timeout_secs must be <= 2147483/);
    expect(configError(() => loadConfig(['--enable-rl', '--rl-control-timeout-secs', '2147484'], {})).message).toMatch(
      /^rl\.control_timeout_secs must be <= 2147483/,
    );
    expect(loadConfig(['--request-timeout-secs', '2147483', '--enable-rl', '--rl-control-timeout-secs', '2147483'], {}).requestTimeoutSecs).toBe(2147483);
  });
});

describe('the same rules through flags, environment and config file (SMG names)', () => {
  it('flags: --rl-version-policy without --enable-rl, and the two minimums with it', () => {
    expect(configError(() => loadConfig(['--rl-version-policy', 'latest-only'], {})).message).toBe(POLICY_NEEDS_RL);
    expect(configError(() => loadConfig(['--rl-version-policy=latest-only'], {})).message).toBe(POLICY_NEEDS_RL);
    expect(configError(() => loadConfig(['--enable-rl', '--rl-control-timeout-secs', '0'], {})).message).toBe(TIMEOUT_MIN);
    expect(configError(() => loadConfig(['--enable-rl', '--rl-fanout-concurrency', '0'], {})).message).toBe(FANOUT_MIN);
    const ok = loadConfig(['--enable-rl', '--rl-control-timeout-secs', '7', '--rl-fanout-concurrency', '3', '--rl-version-policy', 'latest-only'], {});
    expect(ok.rl).toEqual({ enabled: true, controlTimeoutSecs: 7, fanoutConcurrency: 3, versionPolicy: 'latest-only' });
  });

  it('environment variables', () => {
    expect(configError(() => loadConfig([], { RLGATE_RL_VERSION_POLICY: 'latest-only' })).message).toBe(POLICY_NEEDS_RL);
    expect(configError(() => loadConfig([], { RLGATE_ENABLE_RL: 'true', RLGATE_RL_CONTROL_TIMEOUT_SECS: '0' })).message).toBe(TIMEOUT_MIN);
    expect(configError(() => loadConfig([], { RLGATE_ENABLE_RL: '1', RLGATE_RL_FANOUT_CONCURRENCY: '0' })).message).toBe(FANOUT_MIN);
  });

  it('config file with SMG snake_case keys', () => {
    const policy = configFile({ rl: { version_policy: 'latest-only' } });
    expect(configError(() => loadConfig(['--config', policy], {})).message).toBe(POLICY_NEEDS_RL);
    const timeout = configFile({ rl: { enabled: true, control_timeout_secs: 0 } });
    expect(configError(() => loadConfig(['--config', timeout], {})).message).toBe(TIMEOUT_MIN);
    const fanout = configFile({ rl: { enabled: true, fanout_concurrency: 0 } });
    expect(configError(() => loadConfig(['--config', fanout], {})).message).toBe(FANOUT_MIN);
    const ok = configFile({ rl: { enabled: true, control_timeout_secs: 900, fanout_concurrency: 4, version_policy: 'max-staleness:2' } });
    expect(loadConfig(['--config', ok], {}).rl).toEqual({ enabled: true, controlTimeoutSecs: 900, fanoutConcurrency: 4, versionPolicy: 'max-staleness:2' });
  });

  it('precedence: defaults < config file < environment < flags', () => {
    const file = configFile({ rl: { enabled: true, control_timeout_secs: 10, fanout_concurrency: 10 } });
    const env = { RLGATE_RL_CONTROL_TIMEOUT_SECS: '20', RLGATE_RL_FANOUT_CONCURRENCY: '20' };
    const cfg = loadConfig(['--config', file, '--rl-fanout-concurrency', '30'], env);
    expect(cfg.rl).toEqual({ enabled: true, controlTimeoutSecs: 20, fanoutConcurrency: 30, versionPolicy: 'any' });
    // A flag can repair what the file broke, and break what it allowed.
    const broken = configFile({ rl: { enabled: true, control_timeout_secs: 0 } });
    expect(loadConfig(['--config', broken, '--rl-control-timeout-secs', '5'], {}).rl.controlTimeoutSecs).toBe(5);
    expect(configError(() => loadConfig(['--config', file, '--rl-version-policy', 'latest-only', '--enable-rl=false'], {})).message).toBe(POLICY_NEEDS_RL);
  });

  it('values of the wrong type are errors, never silently coerced', () => {
    expect(() => loadConfig(['--enable-rl', '--rl-control-timeout-secs', 'ten'], {})).toThrow(ConfigError);
    expect(() => loadConfig(['--enable-rl', '--rl-fanout-concurrency', '2.5'], {})).toThrow(ConfigError);
    expect(() => loadConfig(['--enable-rl=maybe'], {})).toThrow(ConfigError);
    expect(() => loadConfig(['--rl-control-timeout-secs'], {})).toThrow(ConfigError);
    expect(() => loadConfig(['--no-such-flag'], {})).toThrow(ConfigError);
    const cases: unknown[] = [
      { rl: { enabled: true, control_timeout_secs: true } },
      { rl: { enabled: true, control_timeout_secs: 2.5 } },
      { rl: { enabled: true, fanout_concurrency: [4] } },
      { rl: { enabled: 1 } },
      { rl: { enabled: true, version_policy: 7 } },
      { port: '80a' },
      { port: null },
      { worker_urls: [1, 2] },
      { rl: { enabled: true, no_such_key: 1 } },
      '{"rl": ',
      '[1, 2]',
    ];
    for (const c of cases) {
      expect(() => loadConfig(['--config', configFile(c)], {}), JSON.stringify(c)).toThrow(ConfigError);
    }
    expect(() => loadConfig(['--config', join(dir, 'missing.json')], {})).toThrow(ConfigError);
  });

  it("sgl-router's and SMG's PD launch flags are refused with the reason, not as unknown flags", () => {
    for (const argv of [['--pd-disaggregation'], ['--prefill', 'http://127.0.0.1:1', '8998'], ['--decode', 'http://127.0.0.1:2']]) {
      const e = configError(() => loadConfig(argv, {}));
      expect(e.message).toContain(`${argv[0]}: PD disaggregated routing is not supported yet`);
      expect(e.message).toContain('--worker-urls');
    }
    expect(configError(() => loadConfig(['--prefil'], {})).message).toBe('unknown flag --prefil; see --help');
  });

  it('port is validated whether or not RL is on', () => {
    for (const enabled of [false, true]) {
      configError(() => validateConfig(withRl({ enabled }, { port: 70000 })));
      configError(() => validateConfig(withRl({ enabled }, { port: -1 })));
      expect(() => validateConfig(withRl({ enabled }, { port: 0 }))).not.toThrow();
    }
  });
});

describe('--kv-events (docs/routing.md "KV events")', () => {
  it('is on by default; --no-kv-events, the environment and the config file turn it off', () => {
    expect(loadConfig([], {}).kvEvents).toBe(true);
    expect(loadConfig(['--no-kv-events'], {}).kvEvents).toBe(false);
    expect(loadConfig(['--kv-events=false'], {}).kvEvents).toBe(false);
    expect(loadConfig([], { RLGATE_KV_EVENTS: 'off' }).kvEvents).toBe(false);
    expect(loadConfig(['--config', configFile({ kv_events: false })], {}).kvEvents).toBe(false);
    expect(loadConfig(['--config', configFile({ kvEvents: false })], {}).kvEvents).toBe(false);
    // A flag beats the environment either way.
    expect(loadConfig(['--kv-events'], { RLGATE_KV_EVENTS: 'false' }).kvEvents).toBe(true);
    expect(loadConfig(['--no-kv-events'], { RLGATE_KV_EVENTS: 'true' }).kvEvents).toBe(false);
  });

  it('--no-kv-events takes no value, and only a setting that is on by default has a --no- form', () => {
    expect(configError(() => loadConfig(['--no-kv-events=true'], {})).message).toBe('--no-kv-events takes no value');
    expect(configError(() => loadConfig(['--no-enable-rl'], {})).message).toBe('unknown flag --no-enable-rl; see --help');
  });
});
