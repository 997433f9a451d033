// The gateway's ZMQ wire against bytes captured from TokenSpeed's Python encoder (msgspec), as
// pinned in SMG's engine_zmq_client tests: the ADD prefix must match byte for byte, the output
// batches of every wire revision (9, 10 and 14 elements) must decode, and malformed batches throw.

import { describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { decodeOutput, encodeAbort, encodeAdd, isDeadSentinel, WireError } from '../../../src/engines/zmq/wire.ts';
import type { TokenRequest } from '../../../src/engines/generation.ts';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

// TokenizedGenerateReqInput, all 24 elements, rid "vec-1", input_ids [1,2,3], normalized sampling
// (temperature 0.5, top_p 0.9, top_k disabled, max_new_tokens 8, stop_token_ids {2}, seed 42),
// return_logprob, stream.
const PY_REQUEST =
  'dc0018b9546f6b656e697a656447656e6572617465526571496e707574a57665632d31c0c0' +
  '93010203dc001d08c09102cb3fe0000000000000cb3feccccccccccccdce40000000cb0000' +
  '000000000000cb0000000000000000cb0000000000000000cb3ff000000000000000c0c0c0' +
  'c0c2c3c3c2c0c0c0c02ac0019000c3c3ff00c0c3c0c0c0c2cb0000000000000000c0c0c0c0' +
  'c0c0c0c0';
const PY_OUTPUT =
  '9eb34261746368546f6b656e49444f7574536c696d91a57665632d3191920a0b91a66c656e' +
  '6774689103910291019192cbbfe0000000000000cbbfd000000000000091920a0b01020564cd0190';
const PY_OUTPUT_PRE_LOAD =
  '9ab34261746368546f6b656e49444f7574536c696d91a57665632d3191920a0b91a66c656e' + '6774689103910291019192cbbfe0000000000000cbbfd000000000000091920a0b01';
const PY_OUTPUT_PRE_DP =
  '99b34261746368546f6b656e49444f7574536c696d91a57665632d3191920a0b91a66c656e' + '6774689103910291019192cbbfe0000000000000cbbfd000000000000091920a0b';

const vectorRequest: TokenRequest = {
  rid: 'vec-1',
  inputIds: [1, 2, 3],
  sampling: { max_new_tokens: 8, stop_token_ids: [2], temperature: 0.5, top_p: 0.9, sampling_seed: 42 },
  returnLogprob: true,
  topLogprobsNum: 0,
  stream: true,
};

describe('ADD payload', () => {
  it('equals the Python encoder bytes for the 11-element prefix', () => {
    const py = hex(PY_REQUEST);
    // Same elements 0..10; only the array header differs (24 → 11 elements).
    const streamEnd = py.indexOf(hex('c3ff00c0c3'), 40) + 5;
    const expected = Buffer.concat([Buffer.from([0x9b]), py.subarray(3, streamEnd)]);
    expect(encodeAdd(vectorRequest).toString('hex')).toBe(expected.toString('hex'));
  });

  it('normalizes greedy and defaults, and writes floats as float64 even when integral', () => {
    const packr = new Packr({ useRecords: false });
    const decoded = packr.unpack(encodeAdd({ ...vectorRequest, sampling: { temperature: 0, stop_token_ids: [], top_p: 1 } }));
    const sp = decoded[5] as unknown[];
    expect(sp).toHaveLength(29);
    expect(sp[0]).toBeNull(); // max_new_tokens: engine default
    expect(sp[2]).toBeNull(); // empty stop_token_ids → null
    expect(sp[3]).toBe(1); // temperature 0 → 1.0 ...
    expect(sp[5]).toBe(1); // ... with top_k 1 (greedy)
    expect(sp[23]).toBeNull(); // seed: engine derives it from the rid
    expect(sp[25]).toBe(1); // n
    expect(sp[26]).toEqual([]);
    expect(sp[28]).toBe(true);
    const bytes = encodeAdd({ ...vectorRequest, sampling: { temperature: 1, top_p: 1 } });
    // temperature and top_p: cb 3ff0000000000000 (float64 1.0), never the integer 01
    expect(bytes.toString('hex')).toContain('cb3ff0000000000000cb3ff0000000000000ce40000000');
  });

  it('encodes ABORT as a plain list of rids', () => {
    expect(encodeAbort(['req-1']).toString('hex')).toBe('91a57265712d31');
    expect(encodeAbort([]).toString('hex')).toBe('90');
  });
});

describe('output batches', () => {
  it('decode the 14-element batch with its load snapshot', () => {
    expect(decodeOutput(hex(PY_OUTPUT))).toEqual({
      engineIndex: 1,
      load: { running: 2, waiting: 5, kvUsage: 0.25 },
      outputs: [{ rid: 'vec-1', outputIds: [10, 11], finished: 'length', promptTokens: 3, completionTokens: 2, cachedTokens: 1, logprobs: [-0.5, -0.25] }],
    });
  });

  it('decode older senders: 10 elements (no load), 9 elements (rank 0)', () => {
    expect(decodeOutput(hex(PY_OUTPUT_PRE_LOAD))).toMatchObject({ engineIndex: 1, load: null });
    expect(decodeOutput(hex(PY_OUTPUT_PRE_DP))).toMatchObject({ engineIndex: 0, load: null });
  });

  it('skip unknown trailing fields', () => {
    const packr = new Packr({ useRecords: false });
    const batch = ['BatchTokenIDOutSlim', ['a'], [[5]], [''], [1], [1], [0], [[]], [[]], 0, 0, 0, 0, 0, 'future', [1, 2]];
    expect(decodeOutput(packr.pack(batch)).outputs[0]).toMatchObject({ rid: 'a', outputIds: [5], finished: '' });
  });

  it.each([
    ['ragged columns', ['BatchTokenIDOutSlim', ['a', 'b'], [[1]], ['', ''], [1, 1], [1, 1], [0, 0], [[], []], [[], []]]],
    ['wrong tag', ['BatchStrOut', [], [], [], [], [], [], [], []]],
    ['a map', { rids: [] }],
    ['too short', ['BatchTokenIDOutSlim', []]],
    ['rid not a string', ['BatchTokenIDOutSlim', [7], [[1]], [''], [1], [1], [0], [[]], [[]]]],
  ])('throw WireError on %s', (_name, value) => {
    expect(() => decodeOutput(new Packr({ useRecords: false }).pack(value))).toThrow(WireError);
  });

  it('throw WireError on bytes that are not msgpack', () => {
    expect(() => decodeOutput(Buffer.from([0xc1]))).toThrow(WireError);
  });

  it('recognise the one-frame ENGINE_CORE_DEAD sentinel only', () => {
    expect(isDeadSentinel([Buffer.from('ENGINE_CORE_DEAD')])).toBe(true);
    expect(isDeadSentinel([Buffer.from('ENGINE_CORE_DEAD'), Buffer.alloc(0)])).toBe(false);
    expect(isDeadSentinel([Buffer.from('ENGINE_CORE_DEAF')])).toBe(false);
  });
});
