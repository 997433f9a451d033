// `--metrics-prefix` (RLGATE_METRICS_PREFIX, config key `metricsPrefix` / `metrics_prefix`,
// default `rlgate`): what it accepts, and that `--metrics-prefix smg` exports SMG's own names and
// types (its RL crate's `smg_rl_*` with SMG's labels, the router's `smg_router_request_duration_seconds`
// and `smg_router_ttft_seconds` with rlgate's labels, the worker layer's `smg_worker_requests_active`,
// `smg_worker_cb_state` and `smg_worker_requests_total` with SMG's labels) and nothing under
// `rlgate_`, after real traffic through simulators.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, helpText, loadConfig } from '../../src/gateway/config.ts';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { driveEverySeries, registerEngines, startMetricsEngines, HTTP_MODEL, type MetricsEngines } from '../fixtures/metrics-traffic.ts';
import { samples, types } from '../fixtures/prometheus-text.ts';

function configError(f: () => unknown): ConfigError {
  try {
    f();
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('the setting', () => {
  it('defaults to rlgate; the flag, the environment and the config file set it, flags first', () => {
    expect(loadConfig([], {}).metricsPrefix).toBe('rlgate');
    expect(loadConfig(['--metrics-prefix', 'smg'], {}).metricsPrefix).toBe('smg');
    expect(loadConfig(['--metrics-prefix=smg'], {}).metricsPrefix).toBe('smg');
    expect(loadConfig([], { RLGATE_METRICS_PREFIX: 'smg' }).metricsPrefix).toBe('smg');
    expect(loadConfig(['--metrics-prefix', 'team_a'], { RLGATE_METRICS_PREFIX: 'smg' }).metricsPrefix).toBe('team_a');
    const dir = mkdtempSync(join(tmpdir(), 'rlgate-prefix-'));
    try {
      const file = join(dir, 'c.json');
      writeFileSync(file, JSON.stringify({ metrics_prefix: 'smg' }));
      expect(loadConfig(['--config', file], {}).metricsPrefix).toBe('smg');
      writeFileSync(file, JSON.stringify({ metricsPrefix: 'smg' }));
      expect(loadConfig(['--config', file], {}).metricsPrefix).toBe('smg');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses what cannot start a Prometheus name, naming the setting', () => {
    for (const bad of ['9lives', 'a-b', 'smg:', '_x', 'a b']) {
      expect(configError(() => loadConfig(['--metrics-prefix', bad], {})).message, bad).toMatch(/^metrics_prefix must match /);
    }
  });

  it('--help lists the flag and its variable', () => {
    const line = helpText()
      .split('\n')
      .find((l) => l.includes('--metrics-prefix'));
    expect(line).toContain('RLGATE_METRICS_PREFIX');
    expect(line).toContain('smg');
  });
});

/** SMG's names for the series rlgate has too: type, and the label names rlgate gives them (`le` aside). */
const SMG_SERIES: Array<[name: string, type: string, labels: string[]]> = [
  ['smg_rl_control_calls_total', 'counter', ['op', 'result']],
  ['smg_rl_control_call_duration_seconds', 'histogram', ['op']],
  ['smg_rl_fanout_total', 'counter', ['result']],
  ['smg_rl_fanout_duration_seconds', 'histogram', []],
  ['smg_rl_worker_weight_version', 'gauge', ['worker']],
  ['smg_rl_worker_control_state', 'gauge', ['worker']],
  ['smg_rl_candidates_filtered_total', 'counter', ['reason']],
  ['smg_rl_requests_unroutable_total', 'counter', []],
  ['smg_rl_mixed_version_total', 'counter', []],
  ['smg_rl_version_change_with_inflight_total', 'counter', []],
  ['smg_router_request_duration_seconds', 'histogram', ['model', 'route', 'status', 'worker']],
  ['smg_router_ttft_seconds', 'histogram', ['model', 'route', 'worker']],
  ['smg_worker_requests_active', 'gauge', ['worker']],
  ['smg_worker_cb_state', 'gauge', ['worker']],
  ['smg_worker_requests_total', 'counter', ['model', 'worker']],
];

describe('--metrics-prefix smg on a real gateway', () => {
  let engines: MetricsEngines;
  let t: TestGateway;
  let text: string;

  beforeAll(async () => {
    engines = await startMetricsEngines();
    t = await startTestGateway({ metricsPrefix: 'smg', rl: { controlTimeoutSecs: 20 } });
    const fleet = await registerEngines(t, engines);
    const seen = await driveEverySeries(t, engines, fleet, 'smg');
    expect(seen.refitStatus).toBe(200);
    expect(seen.refitsInFlight).toBe(1);
    text = (await t.http('GET', '/metrics')).text;
  }, 90_000);
  afterAll(async () => {
    await t?.close();
    await engines?.stop();
  });

  it.each(SMG_SERIES)('%s is a %s with samples labelled %j', (name, type, labels) => {
    expect(types(text).get(name)).toBe(type);
    const sampleName = type === 'histogram' ? `${name}_count` : name;
    const found = samples(text).filter((s) => s.name === sampleName);
    expect(found.length).toBeGreaterThan(0);
    for (const s of found) expect(Object.keys(s.labels).sort()).toEqual(labels);
  });

  it("the breaker and in-flight gauges use SMG's codes and worker URLs", () => {
    const workers = [...engines.http.map((s) => s.url), engines.token.url].sort();
    const cb = samples(text).filter((s) => s.name === 'smg_worker_cb_state');
    expect(cb.map((s) => s.labels.worker).sort()).toEqual(workers);
    for (const s of cb) expect(s.value, s.labels.worker).toBe(0); // closed
    const active = samples(text).filter((s) => s.name === 'smg_worker_requests_active');
    expect(active.map((s) => s.labels.worker).sort()).toEqual(workers);
    const attempts = samples(text).filter((s) => s.name === 'smg_worker_requests_total' && s.labels.model === HTTP_MODEL);
    expect(attempts.reduce((a, s) => a + s.value, 0)).toBeGreaterThan(0);
  });

  it('the rest of the families carry the smg prefix too, and no line names an rlgate_ series', () => {
    expect(text).not.toMatch(/rlgate_/);
    for (const name of types(text).keys()) expect(name.startsWith('smg_'), name).toBe(true);
    expect(types(text).get('smg_rl_refits_total')).toBe('counter');
    expect(types(text).get('smg_rl_refits_in_flight')).toBe('gauge');
    expect(types(text).get('smg_engine_state')).toBe('gauge');
    expect(types(text).get('smg_process_cpu_seconds_total')).toBe('counter');
  });
});
