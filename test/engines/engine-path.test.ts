import { describe, expect, it } from 'vitest';
import { gatewayError } from '../fixtures/errors.ts';
import { controlOp, queryWithoutSelector, validateEnginePath } from '../../src/engines/engine-path.ts';

describe('validateEnginePath', () => {
  it.each([
    ['pause_generation', 'pause_generation'],
    ['/pause_generation', 'pause_generation'],
    ['update_weights_from_disk', 'update_weights_from_disk'],
    ['inference/v1/generate', 'inference/v1/generate'],
    ['v1/chat/completions/render', 'v1/chat/completions/render'],
    ['server_info', 'server_info'],
    ['wake_up', 'wake_up'],
    ['a/b/c/d', 'a/b/c/d'],
    ['text_route', 'text_route'],
    ['a.b-c_D9', 'a.b-c_D9'],
    ['...', '...'],
  ])('accepts %j as %j', (raw, path) => {
    expect(validateEnginePath(raw)).toBe(path);
  });

  it.each([
    [''],
    ['/'],
    ['a/b/c/d/e'],
    ['//pause'],
    ['pause/'],
    ['../etc'],
    ['../workers'],
    ['a/../b'],
    ['a/./b'],
    ['.'],
    ['a b'],
    ['a%b'],
    ['a:b'],
    ['a~b'],
    ['pause generation'],
    ['pause%20generation'],
    ['pause?mode=keep'],
    ['pause#frag'],
    ['a\\b'],
    ['pausé'],
  ])('rejects %j with invalid_engine_path', (raw) => {
    const err = gatewayError(() => validateEnginePath(raw));
    expect(err.code).toBe('invalid_engine_path');
    expect(err.status).toBe(400);
    expect(err.context).toEqual({});
    expect(err.message.startsWith('invalid engine path: ')).toBe(true);
  });
});

describe('controlOp', () => {
  it.each([
    'pause_generation',
    'continue_generation',
    'pause',
    'resume',
    'update_weights_from_disk',
    'update_weights_from_tensor',
    'update_weights_from_distributed',
    'init_weights_update_group',
    'destroy_weights_update_group',
    'update_weight_version',
    'flush_cache',
    'abort_request',
    'release_memory_occupation',
    'resume_memory_occupation',
    'sleep',
    'wake_up',
    'collective_rpc',
    'server_info',
    'get_server_info',
    'health',
  ])('labels %j as itself', (path) => {
    expect(controlOp(path)).toBe(path);
  });

  it.each(['inference/v1/generate', '../etc', '', 'text_route', 'model_info', 'Flush_cache', 'flush_cache/x'])('labels %j as other', (path) => {
    expect(controlOp(path)).toBe('other');
  });
});

describe('queryWithoutSelector', () => {
  it.each([
    ['', ''],
    ['selector=a', ''],
    ['selector=engine%3Dsglang', ''],
    ['mode=keep&selector=engine%3Dsglang&level=2', 'mode=keep&level=2'],
    ['selector=a&selector=b', ''],
    ['tags=weights&tags=kv_cache', 'tags=weights&tags=kv_cache'],
    ['selectorx=1', 'selectorx=1'],
    ['xselector=1', 'xselector=1'],
    ['flag', 'flag'],
    ['a=1&&b=2&', 'a=1&b=2'],
    ['&&&', ''],
    ['a=%20b&c=d+e', 'a=%20b&c=d+e'],
    ['a==b', 'a==b'],
    ['=x', '=x'],
    ['selector', ''],
    ['selector=', ''],
    ['sel%65ctor=engine%3Dvllm&mode=keep', 'mode=keep'],
    ['%zz=1&selector=a', '%zz=1'],
  ])('%j → %j', (raw, expected) => {
    expect(queryWithoutSelector(raw)).toBe(expected);
  });
});
