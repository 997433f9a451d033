import { describe, expect, it } from 'vitest';
import { capabilitiesFor } from '../../src/fleet/capabilities.ts';
import type { RlCapabilities } from '../../src/fleet/capabilities.ts';

const SGLANG: RlCapabilities = {
  source: 'static',
  pause_modes: ['abort', 'retract', 'in_place'],
  update_from: ['disk', 'tensor', 'distributed'],
  abort: true,
  flush_cache: true,
  sleep_wake: true,
  reports_weight_version: true,
};
const VLLM: RlCapabilities = {
  source: 'static',
  pause_modes: ['abort', 'wait', 'keep'],
  update_from: ['disk', 'distributed'],
  abort: false,
  flush_cache: false,
  sleep_wake: true,
  reports_weight_version: false,
};
const TOKENSPEED: RlCapabilities = {
  source: 'static',
  pause_modes: ['wait', 'abort'],
  update_from: ['distributed'],
  abort: true,
  flush_cache: true,
  sleep_wake: true,
  reports_weight_version: true,
};
const NOTHING: RlCapabilities = {
  source: 'static',
  pause_modes: [],
  update_from: [],
  abort: false,
  flush_cache: false,
  sleep_wake: false,
  reports_weight_version: false,
};

describe('capabilitiesFor: static rows', () => {
  it.each<[string, RlCapabilities]>([
    ['sglang', SGLANG],
    ['vllm', VLLM],
    ['tokenspeed', TOKENSPEED],
    ['trtllm', NOTHING],
    ['mlx', NOTHING],
    ['unknown', NOTHING],
    ['SGLang', NOTHING],
    ['constructor', NOTHING],
  ])('%s', (engine, expected) => {
    expect(capabilitiesFor(engine, {})).toEqual(expected);
  });

  it('serialises keys in wire order', () => {
    expect(Object.keys(capabilitiesFor('sglang', { 'rl.abort': 'false' }))).toEqual([
      'source',
      'pause_modes',
      'update_from',
      'abort',
      'flush_cache',
      'sleep_wake',
      'reports_weight_version',
    ]);
  });

  it('hands out fresh arrays', () => {
    capabilitiesFor('sglang', {}).pause_modes.push('mutated');
    expect(capabilitiesFor('sglang', {}).pause_modes).toEqual(SGLANG.pause_modes);
  });
});

describe('capabilitiesFor: label overrides', () => {
  it('overrides every field on a row with nothing (SMG capability test)', () => {
    expect(
      capabilitiesFor('trtllm', {
        'rl.pause_modes': 'abort, keep',
        'rl.update_from': 'disk',
        'rl.abort': 'true',
        'rl.flush_cache': 'TRUE',
        'rl.sleep_wake': 'false',
        'rl.reports_weight_version': 'yes',
      }),
    ).toEqual({
      source: 'label',
      pause_modes: ['abort', 'keep'],
      update_from: ['disk'],
      abort: true,
      flush_cache: true,
      sleep_wake: false,
      reports_weight_version: false,
    });
  });

  it.each<[string, Record<string, string>, Partial<RlCapabilities>]>([
    ['one boolean keeps the rest static', { 'rl.abort': 'false' }, { source: 'label', abort: false }],
    ['an empty list label is [] and still an override', { 'rl.pause_modes': '' }, { source: 'label', pause_modes: [] }],
    ['empty items are dropped', { 'rl.update_from': ' , disk,, tensor ,' }, { source: 'label', update_from: ['disk', 'tensor'] }],
    ['`TRUE` is true', { 'rl.abort': 'TRUE' }, { source: 'label' }],
    ['` True ` is true', { 'rl.abort': ' True ' }, { source: 'label' }],
    ['`yes` is false', { 'rl.flush_cache': 'yes' }, { source: 'label', flush_cache: false }],
    ['`1` is false', { 'rl.sleep_wake': '1' }, { source: 'label', sleep_wake: false }],
    ['an empty boolean label is false', { 'rl.reports_weight_version': '' }, { source: 'label', reports_weight_version: false }],
    ['unrelated rl.* labels are not overrides', { 'rl.control_url': 'http://h:1', 'rl.other': 'x' }, {}],
  ])('sglang: %s', (_name, labels, changes) => {
    expect(capabilitiesFor('sglang', labels)).toEqual({ ...SGLANG, ...changes });
  });

  it('an advertising TokenSpeed engine overrides its fallback row', () => {
    expect(
      capabilitiesFor('tokenspeed', {
        'rl.control_url': 'http://127.0.0.1:30406',
        'rl.pause_modes': 'wait,abort,keep',
        'rl.update_from': 'distributed,mooncake',
        'rl.abort': 'true',
        'rl.flush_cache': 'true',
        'rl.sleep_wake': 'true',
        'rl.reports_weight_version': 'true',
      }),
    ).toEqual({
      source: 'label',
      pause_modes: ['wait', 'abort', 'keep'],
      update_from: ['distributed', 'mooncake'],
      abort: true,
      flush_cache: true,
      sleep_wake: true,
      reports_weight_version: true,
    });
  });
});
