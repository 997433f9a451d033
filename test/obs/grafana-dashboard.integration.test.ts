// deploy/grafana/rlgate.json: importable (a `${DS_PROMETHEUS}` datasource input that every query
// uses, a `prefix` variable for `--metrics-prefix`), with panels for refits, refit phases,
// fan-outs, data-plane latency, TTFT and inter-token latency, per-worker in-flight, breakers and
// engine states; and every metric its queries name is exported, with samples, by a real gateway
// (SGLang and TokenSpeed simulators, traffic, a fan-out, a refit) under either prefix.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { driveEverySeries, registerEngines, startMetricsEngines, type MetricsEngines } from '../fixtures/metrics-traffic.ts';
import { sampledNames } from '../fixtures/prometheus-text.ts';

const DASHBOARD = new URL('../../deploy/grafana/rlgate.json', import.meta.url);

interface Target {
  refId: string;
  expr: string;
  datasource: { type: string; uid: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { x: number; y: number; w: number; h: number };
  datasource?: { type: string; uid: string };
  targets?: Target[];
  panels?: Panel[];
}

const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8'));
const allPanels: Panel[] = (dashboard.panels as Panel[]).flatMap((p) => [p, ...(p.panels ?? [])]);
const queryPanels = allPanels.filter((p) => p.type !== 'row');
const exprs = queryPanels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));

/** PromQL words that are not metric names (aggregation modifiers, set and comparison keywords). */
const WORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset']);

/** The metric names a PromQL expression selects: identifiers outside matchers, ranges and label lists that are not calls. */
function metricNames(expr: string): string[] {
  const e = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '');
  const names: string[] = [];
  for (const m of e.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    if (
      WORDS.has(m[0]) ||
      e
        .slice(m.index! + m[0].length)
        .trimStart()
        .startsWith('(')
    )
      continue;
    names.push(m[0]);
  }
  return names;
}

const withPrefix = (expr: string, prefix: string) => expr.replaceAll('${prefix}', prefix);

describe('the Grafana dashboard file', () => {
  it('declares the Prometheus datasource input, and every panel and query uses it', () => {
    expect(dashboard.__inputs).toEqual([expect.objectContaining({ name: 'DS_PROMETHEUS', type: 'datasource', pluginId: 'prometheus' })]);
    expect(dashboard.__requires).toEqual(expect.arrayContaining([expect.objectContaining({ type: 'datasource', id: 'prometheus' })]));
    expect(queryPanels.length).toBeGreaterThan(0);
    for (const p of queryPanels) {
      expect(p.datasource, p.title).toEqual({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      for (const t of p.targets!) expect(t.datasource, `${p.title} ${t.refId}`).toEqual({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });
      expect(new Set(p.targets!.map((t) => t.refId)).size, p.title).toBe(p.targets!.length);
    }
  });

  it('has unique panel ids, panels inside the 24-column grid, a uid and a title', () => {
    const ids = allPanels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const p of allPanels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
      expect(p.gridPos.w * p.gridPos.h, p.title).toBeGreaterThan(0);
    }
    expect(dashboard.uid).toMatch(/^[a-zA-Z0-9_-]{1,40}$/);
    expect(dashboard.title).toBe('rlgate');
    expect(dashboard.id).toBeNull();
  });

  it('has a `prefix` variable offering rlgate (selected) and smg, and every metric it names starts with it', () => {
    const prefix = dashboard.templating.list.find((v: { name: string }) => v.name === 'prefix');
    expect(prefix).toMatchObject({ type: 'custom', current: { value: 'rlgate' } });
    expect(prefix.options.map((o: { value: string }) => o.value)).toEqual(['rlgate', 'smg']);
    for (const expr of exprs) {
      const names = metricNames(withPrefix(expr, 'PFX'));
      expect(names.length, expr).toBeGreaterThan(0);
      for (const n of names) expect(n.startsWith('PFX_'), `${n} in ${expr}`).toBe(true);
    }
  });

  it('has panels for refits, refit phases, fan-outs, data-plane latency, TTFT, inter-token latency, in-flight, breakers and engine states', () => {
    const used = new Set(exprs.flatMap((e) => metricNames(withPrefix(e, 'rlgate'))));
    for (const name of [
      'rlgate_rl_refits_in_flight',
      'rlgate_rl_refits_total',
      'rlgate_rl_refit_phase_duration_seconds_bucket',
      'rlgate_rl_fanout_total',
      'rlgate_rl_fanout_duration_seconds_bucket',
      'rlgate_router_request_duration_seconds_bucket',
      'rlgate_router_ttft_seconds_bucket',
      'rlgate_router_inter_token_latency_seconds_bucket',
      'rlgate_worker_requests_active',
      'rlgate_worker_cb_state',
      'rlgate_engine_state',
    ]) {
      expect(used, name).toContain(name);
    }
  });
});

describe('every metric the dashboard queries is exported by a real gateway', () => {
  let engines: MetricsEngines;

  beforeAll(async () => {
    engines = await startMetricsEngines();
  }, 60_000);
  afterAll(async () => {
    await engines?.stop();
  });

  describe.each(['rlgate', 'smg'])('--metrics-prefix %s', (prefix) => {
    let t: TestGateway;

    beforeAll(async () => {
      t = await startTestGateway({ metricsPrefix: prefix, rl: { controlTimeoutSecs: 20 } });
    }, 30_000);
    afterAll(async () => {
      await t?.close();
    });

    it('after traffic, a fan-out and a refit, each name has samples on GET /metrics', async () => {
      const fleet = await registerEngines(t, engines);
      const seen = await driveEverySeries(t, engines, fleet, prefix);
      expect(seen.refitStatus).toBe(200);
      const exported = sampledNames((await t.http('GET', '/metrics')).text);
      const wanted = [...new Set(exprs.flatMap((e) => metricNames(withPrefix(e, prefix))))].sort();
      expect(wanted.length).toBeGreaterThan(20);
      expect(
        wanted.filter((n) => !exported.has(n)),
        'names the dashboard queries that /metrics lacks',
      ).toEqual([]);
    }, 90_000);
  });
});
