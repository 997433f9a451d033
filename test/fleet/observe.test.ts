import { describe, expect, it } from 'vitest';
import { observeControlCall } from '../../src/fleet/observe.ts';
import type { Observation } from '../../src/fleet/observe.ts';

const utf8 = (s: string) => new TextEncoder().encode(s);

describe('observeControlCall: control routes', () => {
  it.each([
    ['pause_generation', 'paused'],
    ['pause', 'paused'],
    ['continue_generation', 'active'],
    ['resume', 'active'],
    ['resume_memory_occupation', 'active'],
    ['wake_up', 'active'],
    ['release_memory_occupation', 'asleep'],
    ['sleep', 'asleep'],
    ['/pause_generation', 'paused'],
  ])('%s → %s whatever the body', (path, control) => {
    for (const body of [null, '', '{}', 'not json', utf8('{"tags":["weights"]}')]) {
      expect(observeControlCall(path, body)).toEqual({ control });
    }
  });

  it.each([
    'flush_cache',
    'server_info',
    'abort_request',
    'init_weights_update_group',
    'inference/v1/generate',
    'pause_generation/x',
    'Pause_generation',
    'constructor',
  ])('%s records nothing', (path) => {
    expect(observeControlCall(path, '{"weight_version":"1"}')).toEqual({});
  });
});

describe('observeControlCall: version routes', () => {
  it.each<[string, string | Uint8Array | null, Observation]>([
    ['update_weights_from_disk', '{"model_path":"/models/x","weight_version":"42","flush_cache":true}', { version: '42' }],
    ['update_weights_from_tensor', '{"serialized_named_tensors":["..."],"weight_version":7}', { version: '7' }],
    ['update_weights_from_distributed', '{"names":[],"weight_version":"s3"}', { version: 's3' }],
    ['update_weight_version', '{"new_version":"43","abort_all_requests":false}', { version: '43' }],
    ['update_weight_version', '{"new_version":9}', { version: '9' }],
    ['update_weights_from_disk', utf8('{"weight_version":" e2e-refit "}'), { version: 'e2e-refit' }],
    ['/update_weights_from_disk', '{"weight_version":"43"}', { version: '43' }],
    // Integers past 2^53 keep every digit, as SMG's u64 does.
    ['update_weights_from_disk', '{"weight_version":1732000000123456789}', { version: '1732000000123456789' }],
    [
      'update_weights_from_disk',
      '{"a":{"weight_version":1},"weight_version" : 18446744073709551615 ,"b":"\\"weight_version\\":2"}',
      { version: '18446744073709551615' },
    ],
    ['update_weights_from_disk', '{"weight_version":1.5}', { version: '1.5' }],
    // Missing, null: nothing (the route says nothing about the version).
    ['update_weights_from_disk', '{"model_path":"/ckpt"}', { rejected: 'missing' }],
    ['update_weights_from_disk', '{"weight_version":null}', { rejected: 'missing' }],
    // The wrong field for the route.
    ['update_weight_version', '{"weight_version":"1"}', { rejected: 'missing' }],
    ['update_weights_from_disk', '{"new_version":"1"}', { rejected: 'missing' }],
    // Unusable JSON types (`"weight_version": true` among them).
    ['update_weights_from_disk', '{"weight_version":true}', { rejected: 'wrong_type' }],
    ['update_weights_from_disk', '{"weight_version":["42"]}', { rejected: 'wrong_type' }],
    ['update_weights_from_disk', '{"weight_version":{"v":"42"}}', { rejected: 'wrong_type' }],
    ['update_weight_version', '{"new_version":false}', { rejected: 'wrong_type' }],
    ['update_weight_version', '{"new_version":[]}', { rejected: 'wrong_type' }],
    // Values the version gate refuses (`"bad version"` among them).
    ['update_weights_from_disk', '{"weight_version":""}', { rejected: 'empty' }],
    ['update_weights_from_disk', '{"weight_version":"   "}', { rejected: 'empty' }],
    ['update_weights_from_disk', `{"weight_version":"${'x'.repeat(129)}"}`, { rejected: 'too_long' }],
    ['update_weights_from_disk', '{"weight_version":"v1\\u0007"}', { rejected: 'not_printable_ascii' }],
    ['update_weights_from_disk', '{"weight_version":"bad version"}', { rejected: 'not_printable_ascii' }],
    ['update_weight_version', '{"new_version":"  "}', { rejected: 'empty' }],
    // Not a JSON object.
    ['update_weights_from_disk', 'not json', { rejected: 'not_json' }],
    ['update_weights_from_disk', '', { rejected: 'not_json' }],
    ['update_weights_from_disk', null, { rejected: 'not_json' }],
    ['update_weights_from_disk', '"42"', { rejected: 'not_json' }],
    ['update_weights_from_disk', '["42"]', { rejected: 'not_json' }],
    ['update_weights_from_disk', '{"weight_version":-1e400}', { rejected: 'not_json' }],
    ['update_weights_from_disk', 'null', { rejected: 'not_json' }],
    ['update_weights_from_disk', new Uint8Array([0x7b, 0xff, 0x7d]), { rejected: 'not_json' }],
    ['update_weights_from_disk', '\ufeff{"weight_version":"1"}', { rejected: 'not_json' }],
  ])('%s %j → %j', (path, body, expected) => {
    expect(observeControlCall(path, body)).toEqual(expected);
  });
});
