// The trainer simulator's pure parts: the synthetic parameter list and its chunks, and the flags
// of its command. The refit itself runs over real sockets in broadcast.integration.test.ts.

import { describe, expect, it } from 'vitest';
import { makeChunks } from '../../../src/cli/trainer/chunks.ts';
import { parseTrainerArgs } from '../../../src/cli/trainer/main.ts';

describe('makeChunks', () => {
  it('cuts the parameters into chunks of perChunk, in order, with equal-length lists', () => {
    const chunks = makeChunks({ params: 5, perChunk: 2, shape: [4, 8], dtype: 'float16' });
    expect(chunks.map((c) => c.names)).toEqual([
      ['model.layers.0.mlp.weight', 'model.layers.1.mlp.weight'],
      ['model.layers.2.mlp.weight', 'model.layers.3.mlp.weight'],
      ['model.layers.4.mlp.weight'],
    ]);
    for (const c of chunks) {
      expect(c.dtypes).toEqual(c.names.map(() => 'float16'));
      expect(c.shapes).toEqual(c.names.map(() => [4, 8]));
    }
  });

  it('defaults to bfloat16 [256, 256] and gives every parameter its own shape array', () => {
    const [chunk] = makeChunks({ params: 2, perChunk: 64 });
    expect(chunk).toEqual({
      names: ['model.layers.0.mlp.weight', 'model.layers.1.mlp.weight'],
      dtypes: ['bfloat16', 'bfloat16'],
      shapes: [
        [256, 256],
        [256, 256],
      ],
    });
    chunk!.shapes[0]!.push(1);
    expect(chunk!.shapes[1]).toEqual([256, 256]);
  });

  it.each([
    [{ params: 0, perChunk: 3 }, 0],
    [{ params: 3, perChunk: 3 }, 1],
    [{ params: 146, perChunk: 64 }, 3],
  ])('%o → %i chunks', (opts, n) => {
    expect(makeChunks(opts)).toHaveLength(n);
  });

  it.each([
    { params: -1, perChunk: 1 },
    { params: 1.5, perChunk: 1 },
    { params: 4, perChunk: 0 },
  ])('rejects %o', (opts) => {
    expect(() => makeChunks(opts)).toThrow(RangeError);
  });
});

describe('parseTrainerArgs', () => {
  it('reads every flag', () => {
    expect(
      parseTrainerArgs(
        [
          '--gateway',
          'http://127.0.0.1:1',
          '--version',
          '7',
          '--params',
          '10',
          '--per-chunk',
          '4',
          '--admin-key',
          'k',
          '--selector',
          'role=rollout',
          '--group',
          'slime-pp_0',
          '--dtype',
          'float32',
          '--shape',
          '2,3',
          '--master-address',
          'trainer',
        ],
        {},
      ),
    ).toEqual({
      gateway: 'http://127.0.0.1:1',
      version: '7',
      params: 10,
      perChunk: 4,
      adminKey: 'k',
      selector: 'role=rollout',
      groupName: 'slime-pp_0',
      dtype: 'float32',
      shape: [2, 3],
      masterAddress: 'trainer',
    });
  });

  it('has defaults, and takes the admin key from RLGATE_ADMIN_KEY when no flag gives it', () => {
    expect(parseTrainerArgs(['--gateway', 'http://g', '--version', '1'], { RLGATE_ADMIN_KEY: 'env-key' })).toEqual({
      gateway: 'http://g',
      version: '1',
      params: 146,
      perChunk: 64,
      adminKey: 'env-key',
      dtype: 'bfloat16',
      shape: [256, 256],
    });
  });

  it.each([
    [['--version', '1']],
    [['--gateway', 'http://g']],
    [['--gateway', 'http://g', '--version', '1', '--per-chunk', '0']],
    [['--gateway', 'http://g', '--version', '1', '--params', 'many']],
    [['--gateway', 'http://g', '--version', '1', '--bogus']],
  ])('rejects %j', (argv) => {
    expect(() => parseTrainerArgs(argv, {})).toThrow();
  });
});
