// planRefit as tables: the engine calls of each phase for disk and distributed (NCCL) sources,
// the steps the coordinator runs (collective, joined), rank offsets and world size from tp_size,
// the version on the last chunk only, read-back steps (`verify_weights`), and what is refused.
// The expected paths and bodies are the ones docs/rl-control-plane.md states (SGLang's routes).

import { describe, expect, it } from 'vitest';
import { gatewayError } from '../fixtures/errors.ts';
import { Registry } from '../../src/fleet/registry.ts';
import type { Worker } from '../../src/fleet/worker.ts';
import { DEFAULT_GROUP, gpusOf, planRefit, READ_BACK } from '../../src/refit/plan.ts';
import { parseRefitRequest } from '../../src/refit/request.ts';
import type { RefitRequest } from '../../src/wire/refit-request.ts';

const registry = new Registry('replica-a');
function worker(port: number, labels: Record<string, string> = {}): Worker {
  return registry.register({ url: `http://127.0.0.1:${port}`, labels }).worker;
}

const disk = (over: Partial<Extract<RefitRequest['source'], { kind: 'disk' }>> = {}, req: Partial<RefitRequest> = {}): RefitRequest => ({
  weight_version: '8',
  source: { kind: 'disk', model_path: '/models/step-8', ...over },
  ...req,
});

const CHUNKS = [
  { names: ['a.weight', 'a.bias'], dtypes: ['bfloat16', 'bfloat16'], shapes: [[4, 4], [4]] },
  { names: ['b.weight'], dtypes: ['float32'], shapes: [[8, 2]], load_format: 'flattened_bucket' },
];
const distributed = (over: Partial<Extract<RefitRequest['source'], { kind: 'distributed' }>> = {}, req: Partial<RefitRequest> = {}): RefitRequest => ({
  weight_version: '8',
  source: { kind: 'distributed', master_address: '10.0.0.1', master_port: 29500, chunks: CHUNKS, ...over },
  ...req,
});

describe('planRefit: the phases every refit has', () => {
  const w = worker(30000);
  it.each([
    ['no pause_mode', disk(), { method: 'POST', path: 'pause_generation', body: {} }],
    ['pause_mode abort', disk({}, { pause_mode: 'abort' }), { method: 'POST', path: 'pause_generation', body: { mode: 'abort' } }],
    ['pause_mode retract (distributed)', distributed({}, { pause_mode: 'retract' }), { method: 'POST', path: 'pause_generation', body: { mode: 'retract' } }],
  ])('pause with %s', (_name, req, pause) => {
    expect(planRefit(req, [w]).pause).toEqual(pause);
  });

  it.each([
    ['disk', disk()],
    ['distributed', distributed()],
  ])('%s: resume is continue_generation {}', (_name, req) => {
    expect(planRefit(req, [w]).resume).toEqual({ method: 'POST', path: 'continue_generation', body: {} });
  });

  it.each([
    ['absent', undefined, { method: 'GET', path: 'model_info' }],
    ['true', true, { method: 'GET', path: 'model_info' }],
    ['false', false, null],
  ])('verify %s', (_name, verify, spec) => {
    expect(planRefit(disk({}, verify === undefined ? {} : { verify }), [w]).verify).toEqual(spec);
    expect(planRefit(distributed({}, verify === undefined ? {} : { verify }), [w]).verify).toEqual(spec);
  });
});

describe('planRefit: disk', () => {
  const ws = [worker(30001), worker(30002)];
  it.each([
    ['defaults', {}, { model_path: '/models/step-8', weight_version: '8', flush_cache: true }],
    ['flush_cache false', { flush_cache: false }, { model_path: '/models/step-8', weight_version: '8', flush_cache: false }],
    ['load_format', { load_format: 'safetensors' }, { model_path: '/models/step-8', weight_version: '8', flush_cache: true, load_format: 'safetensors' }],
  ])('%s: one update_weights_from_disk step, the same body for every engine', (_name, over, body) => {
    const plan = planRefit(disk(over), ws);
    expect(plan.steps).toEqual([{ name: 'update_weights_from_disk', runOn: 'remaining' }]);
    for (const w of ws) expect(plan.step(0, w)).toEqual({ method: 'POST', path: 'update_weights_from_disk', body });
    expect(plan.group).toBeUndefined();
    expect(plan.expect).toBeUndefined();
  });

  it('does not need tp_size and refuses nothing about the fleet', () => {
    expect(() => planRefit(disk(), [worker(30003, { tp_size: 'garbage' })])).not.toThrow();
  });
});

describe('planRefit: distributed', () => {
  const a = worker(31000); // no tp_size: 1 GPU
  const b = worker(31001, { tp_size: '2' });
  const c = worker(31002, { tp_size: '4' });

  it('steps: init, one update per chunk (all collective), then destroy on every engine that joined', () => {
    expect(planRefit(distributed(), [a, b, c]).steps).toEqual([
      { name: 'init_weights_update_group', runOn: 'remaining', collective: true },
      { name: 'update_weights_from_distributed 1/2', runOn: 'remaining', collective: true },
      { name: 'update_weights_from_distributed 2/2', runOn: 'remaining', collective: true },
      { name: 'destroy_weights_update_group', runOn: 'joined' },
    ]);
  });

  it('keep_group: no destroy step', () => {
    expect(planRefit(distributed({ keep_group: true }), [a]).steps.map((s) => s.name)).toEqual([
      'init_weights_update_group',
      'update_weights_from_distributed 1/2',
      'update_weights_from_distributed 2/2',
    ]);
  });

  // Rank 0 is the trainer; engine i starts after the tp_size ranks of the engines before it.
  it.each([
    ['one engine, no tp_size', [a], [1], 2],
    ['row order a, b, c', [a, b, c], [1, 2, 4], 8],
    ['row order c, b, a', [c, b, a], [1, 5, 7], 8],
    ['two of tp 2', [b, worker(31003, { tp_size: '2' })], [1, 3], 5],
  ])('rank offsets and world size: %s', (_name, targets, offsets, worldSize) => {
    const plan = planRefit(distributed(), targets);
    expect(plan.group).toEqual({ worldSize, rankOffsets: Object.fromEntries(targets.map((w, i) => [w.id, offsets[i]])) });
    targets.forEach((w, i) => expect(plan.step(0, w).body).toMatchObject({ rank_offset: offsets[i], world_size: worldSize }));
  });

  it.each([
    ['defaults', {}, { group_name: DEFAULT_GROUP, backend: 'nccl' }],
    ['group_name and backend', { group_name: 'g7', backend: 'gloo' }, { group_name: 'g7', backend: 'gloo' }],
  ])('init body (%s)', (_name, over, names) => {
    const plan = planRefit(distributed(over), [a, b]);
    expect(plan.step(0, b)).toEqual({
      method: 'POST',
      path: 'init_weights_update_group',
      body: { master_address: '10.0.0.1', master_port: 29500, rank_offset: 2, world_size: 4, ...names },
    });
  });

  it.each([
    ['flush_cache absent', {}, false],
    ['flush_cache true', { flush_cache: true }, true],
  ])('chunk bodies (%s): the version and flush_cache on the last chunk only', (_name, over, lastFlush) => {
    const plan = planRefit(distributed(over), [a]);
    expect(plan.step(1, a)).toEqual({
      method: 'POST',
      path: 'update_weights_from_distributed',
      body: {
        names: ['a.weight', 'a.bias'],
        dtypes: ['bfloat16', 'bfloat16'],
        shapes: [[4, 4], [4]],
        group_name: DEFAULT_GROUP,
        flush_cache: false,
        abort_all_requests: false,
      },
    });
    expect(plan.step(2, a)).toEqual({
      method: 'POST',
      path: 'update_weights_from_distributed',
      body: {
        names: ['b.weight'],
        dtypes: ['float32'],
        shapes: [[8, 2]],
        group_name: DEFAULT_GROUP,
        flush_cache: lastFlush,
        abort_all_requests: false,
        weight_version: '8',
        load_format: 'flattened_bucket',
      },
    });
  });

  it('a single chunk is also the last: it carries the version', () => {
    const plan = planRefit(distributed({ chunks: [CHUNKS[0]!] }), [a]);
    expect(plan.steps.map((s) => s.name)).toEqual(['init_weights_update_group', 'update_weights_from_distributed 1/1', 'destroy_weights_update_group']);
    expect(plan.step(1, a).body).toMatchObject({ weight_version: '8', flush_cache: false });
  });

  it('destroy names the group', () => {
    const plan = planRefit(distributed({ group_name: 'g7' }), [a, b]);
    for (const w of [a, b]) expect(plan.step(3, w)).toEqual({ method: 'POST', path: 'destroy_weights_update_group', body: { group_name: 'g7' } });
  });

  it.each([
    ['equal to 1 + Σ tp_size', 8, 'accepted'],
    ['one short (the trainer rank left out)', 7, 'refused'],
    ['one over', 9, 'refused'],
    ['one GPU per engine (tp_size ignored)', 4, 'refused'],
  ])('a given world_size %s (%i) is %s', (_name, worldSize, verdict) => {
    const plan = () => planRefit(distributed({ world_size: worldSize }), [a, b, c]);
    if (verdict === 'accepted') {
      expect(plan().group!.worldSize).toBe(worldSize);
      return;
    }
    const err = gatewayError(plan);
    expect(err.code).toBe('invalid_request');
    expect(err.status).toBe(400);
    expect(err.context).toEqual({ field: '/source/world_size', expected: 8 });
  });
});

describe('gpusOf: the ranks one engine joins with', () => {
  it.each([
    ['absent', 1, {}, {}],
    ['tp_size 4', 4, { tp_size: '4' }, {}],
    ['padded', 2, { tp_size: ' 2 ' }, {}],
    ['zero counts as one', 1, { tp_size: '0' }, {}],
    ['not a number', 1, { tp_size: 'garbage' }, {}],
    ['discovered', 8, {}, { tp_size: '8' }],
    ['caller label over discovered', 2, { tp_size: '2' }, { tp_size: '8' }],
  ])('%s → %i', (_name, gpus, callerLabels, discoveredLabels) => {
    expect(gpusOf({ ...worker(32000), callerLabels, discoveredLabels })).toBe(gpus);
  });
});

describe('planRefit: read-back steps (verify_weights)', () => {
  const a = worker(33000);
  const checks = [
    { name: 'model.embed_tokens.weight', values: [0.5, -1, null] },
    { name: 'lm_head.weight', values: [2] },
  ];

  it.each([
    [
      'disk: after the load',
      disk({}, { verify_weights: checks }),
      ['update_weights_from_disk', `${READ_BACK} model.embed_tokens.weight`, `${READ_BACK} lm_head.weight`],
      1,
    ],
    [
      'distributed: after the chunks, before the group is destroyed',
      distributed({}, { verify_weights: checks }),
      [
        'init_weights_update_group',
        'update_weights_from_distributed 1/2',
        'update_weights_from_distributed 2/2',
        `${READ_BACK} model.embed_tokens.weight`,
        `${READ_BACK} lm_head.weight`,
        'destroy_weights_update_group',
      ],
      3,
    ],
    [
      'distributed with keep_group: at the end',
      distributed({ keep_group: true }, { verify_weights: checks }),
      [
        'init_weights_update_group',
        'update_weights_from_distributed 1/2',
        'update_weights_from_distributed 2/2',
        `${READ_BACK} model.embed_tokens.weight`,
        `${READ_BACK} lm_head.weight`,
      ],
      3,
    ],
  ])('%s', (_name, req, names, at) => {
    const plan = planRefit(req, [a]);
    expect(plan.steps.map((s) => s.name)).toEqual(names);
    // Read-only, so never collective and run only where the load succeeded.
    for (const i of [at, at + 1]) expect(plan.steps[i]).toEqual({ name: names[i], runOn: 'remaining' });
    expect(plan.step(at, a)).toEqual({ method: 'GET', path: 'get_weights_by_name', body: { name: 'model.embed_tokens.weight', truncate_size: 3 } });
    expect(plan.step(at + 1, a)).toEqual({ method: 'GET', path: 'get_weights_by_name', body: { name: 'lm_head.weight', truncate_size: 1 } });
    expect(plan.expect!(at)).toEqual([0.5, -1, null]);
    expect(plan.expect!(at + 1)).toEqual([2]);
    // The steps around the read-backs still get their own calls and expect nothing.
    for (let i = 0; i < names.length; i++) {
      if (i === at || i === at + 1) continue;
      expect(plan.step(i, a).path).toBe(names[i]!.split(' ')[0]);
      expect(plan.expect!(i)).toBeUndefined();
    }
  });

  it('the destroy after the read-backs is still the destroy, with its group', () => {
    const plan = planRefit(distributed({ group_name: 'g7' }, { verify_weights: checks }), [a]);
    expect(plan.step(5, a)).toEqual({ method: 'POST', path: 'destroy_weights_update_group', body: { group_name: 'g7' } });
  });
});

describe('refit requests planRefit never sees', () => {
  // planRefit trusts its input: the schema is what refuses these, with the field that failed.
  const base = { weight_version: '8', source: { kind: 'disk', model_path: '/m' } };
  it.each([
    ['a tensor source (only disk and distributed exist)', { ...base, source: { kind: 'tensor', named_tensors: [] } }, '/source'],
    ['a disk source without model_path', { ...base, source: { kind: 'disk' } }, '/source'],
    [
      'world_size 1 (the trainer alone)',
      { ...base, source: { kind: 'distributed', master_address: 'h', master_port: 1, world_size: 1, chunks: CHUNKS } },
      '/source',
    ],
    ['no chunks', { ...base, source: { kind: 'distributed', master_address: 'h', master_port: 1, chunks: [] } }, '/source'],
    [
      'a chunk whose lists differ in length',
      { ...base, source: { kind: 'distributed', master_address: 'h', master_port: 1, chunks: [{ names: ['a', 'b'], dtypes: ['f32'], shapes: [[1], [1]] }] } },
      '/source/chunks/0',
    ],
    ['a verify_weights entry without values', { ...base, verify_weights: [{ name: 'w', values: [] }] }, '/verify_weights/0/values'],
  ])('%s → 400 invalid_request', (_name, body, field) => {
    const err = gatewayError(() => parseRefitRequest(structuredClone(body)));
    expect(err.code).toBe('invalid_request');
    expect(err.status).toBe(400);
    expect(err.context.field).toBe(field);
  });
});

describe('planRefit: strategies', () => {
  const sglang = () => worker(31001);
  const keepOnly = () => worker(31002, { 'rl.pause_modes': 'wait,keep' });
  const waitOnly = () => worker(31003, { 'rl.pause_modes': 'wait,abort' });

  it('rolling pauses in the strategy mode, abort by default', () => {
    expect(planRefit(disk({}, { strategy: { kind: 'rolling' } }), [sglang()]).pause.body).toEqual({ mode: 'abort' });
    expect(planRefit(disk({}, { strategy: { kind: 'rolling', pause_mode: 'retract' } }), [sglang()]).pause.body).toEqual({ mode: 'retract' });
  });

  it('in_flight pauses in place: in_place where every engine has it, else keep', () => {
    expect(planRefit(disk({}, { strategy: { kind: 'in_flight' } }), [sglang()]).pause.body).toEqual({ mode: 'in_place' });
    expect(planRefit(disk({}, { strategy: { kind: 'in_flight' } }), [keepOnly()]).pause.body).toEqual({ mode: 'keep' });
  });

  it('in_flight is refused (409 strategy_unsupported) naming each engine that cannot, or when the targets share no mode', () => {
    const w = waitOnly();
    const e = gatewayError(() => planRefit(disk({}, { strategy: { kind: 'in_flight' } }), [sglang(), w]));
    expect(e.code).toBe('strategy_unsupported');
    expect(e.status).toBe(409);
    expect(e.context.workers).toBe(w.id);
    const mixed = gatewayError(() => planRefit(disk({}, { strategy: { kind: 'in_flight' } }), [sglang(), keepOnly()]));
    expect(mixed.code).toBe('strategy_unsupported');
    expect(mixed.context.workers).toBe('');
  });

  it("in_flight's cache decides the flush of the load: keep by default, flush on request where the engines pause with keep", () => {
    const load = (req: RefitRequest, w: Worker) => planRefit(req, [w]).step(0, w).body;
    expect(load(disk({}, { strategy: { kind: 'in_flight' } }), sglang())).toMatchObject({ flush_cache: false });
    expect(load(disk({}, { strategy: { kind: 'in_flight', cache: 'keep' } }), sglang())).toMatchObject({ flush_cache: false });
    expect(load(disk({}, { strategy: { kind: 'in_flight', cache: 'flush' } }), keepOnly())).toMatchObject({ flush_cache: true });
    const last = (req: RefitRequest, w: Worker) => planRefit(req, [w]).step(CHUNKS.length, w).body;
    expect(last(distributed({}, { strategy: { kind: 'in_flight' } }), sglang())).toMatchObject({ flush_cache: false });
    expect(last(distributed({}, { strategy: { kind: 'in_flight', cache: 'flush' } }), keepOnly())).toMatchObject({ flush_cache: true });
  });

  it('in_flight with cache flush over engines that pause in_place (SGLang) is refused: they cannot flush while requests are frozen', () => {
    const e = gatewayError(() => planRefit(disk({}, { strategy: { kind: 'in_flight', cache: 'flush' } }), [sglang()]));
    expect(e.code).toBe('strategy_unsupported');
    expect(e.message).toContain('flush');
  });
});

describe('parseRefitRequest: strategies', () => {
  const base = { weight_version: '8', source: { kind: 'disk', model_path: '/m' } };
  const refused = (body: unknown) => gatewayError(() => parseRefitRequest(body));

  it('accepts each kind with its own fields', () => {
    expect(parseRefitRequest({ ...base, strategy: { kind: 'all' } }).strategy).toEqual({ kind: 'all' });
    const rolling = { kind: 'rolling', max_unavailable: '25%', drain_timeout_ms: 0, pause_mode: 'retract', max_failed: 2 };
    expect(parseRefitRequest({ ...base, strategy: rolling }).strategy).toEqual(rolling);
    expect(parseRefitRequest({ ...base, strategy: { kind: 'in_flight', cache: 'keep' } }).strategy).toEqual({ kind: 'in_flight', cache: 'keep' });
  });

  it.each([
    [{ kind: 'sometimes' }, '/strategy/kind'],
    [{ kind: 'rolling', max_unavailable: 0 }, '/strategy/max_unavailable'],
    [{ kind: 'rolling', max_unavailable: '0%' }, '/strategy/max_unavailable'],
    [{ kind: 'rolling', max_unavailable: '150%' }, '/strategy/max_unavailable'],
    [{ kind: 'rolling', pause_mode: 'in_place' }, '/strategy/pause_mode'],
    [{ kind: 'rolling', cache: 'keep' }, '/strategy/cache'],
    [{ kind: 'in_flight', max_unavailable: 1 }, '/strategy/max_unavailable'],
    [{ kind: 'all', max_failed: 1 }, '/strategy/max_failed'],
    [{ kind: 'rolling', surge: 1 }, '/strategy/surge'],
  ])('refuses %j (400 at %s)', (strategy, field) => {
    const e = refused({ ...base, strategy });
    expect(e.code).toBe('invalid_request');
    expect(String(e.context.field)).toContain(field.split('/').slice(0, 3).join('/'));
  });

  it('refuses a rolling NCCL refit, a request pause_mode beside a strategy, and a source flush that contradicts in_flight', () => {
    const nccl = { weight_version: '8', source: { kind: 'distributed', master_address: 'h', master_port: 1, chunks: CHUNKS } };
    expect(refused({ ...nccl, strategy: { kind: 'rolling' } }).context.field).toBe('/strategy/kind');
    expect(refused({ ...base, pause_mode: 'abort', strategy: { kind: 'rolling' } }).context.field).toBe('/pause_mode');
    expect(refused({ ...base, source: { ...base.source, flush_cache: true }, strategy: { kind: 'in_flight', cache: 'keep' } }).context.field).toBe(
      '/source/flush_cache',
    );
    expect(refused({ ...base, source: { ...base.source, flush_cache: true }, strategy: { kind: 'in_flight' } }).context.field).toBe('/source/flush_cache');
    expect(parseRefitRequest({ ...base, source: { ...base.source, flush_cache: false }, strategy: { kind: 'in_flight', cache: 'keep' } }).strategy?.kind).toBe(
      'in_flight',
    );
  });
});
