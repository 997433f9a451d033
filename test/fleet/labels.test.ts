import { describe, expect, it } from 'vitest';
import { DISCOVERED_KEYS, flattenModelInfo, foldParallelism, labelsFromServerInfo, sizeLabel } from '../../src/fleet/labels.ts';

describe('DISCOVERED_KEYS', () => {
  it('is the TokenSpeed gRPC key list, newer builds included', () => {
    expect([...DISCOVERED_KEYS]).toEqual([
      'model',
      'served_model_name',
      'tokenizer',
      'tp_size',
      'dp_size',
      'pp_size',
      'context_length',
      'max_total_tokens',
      'max_running_requests',
      'load_balance_method',
      'is_embedding',
      'vocab_size',
      'weight_version',
      'constrained_decoding_mode',
    ]);
  });
});

describe('labelsFromServerInfo (SGLang HTTP)', () => {
  // A trimmed SGLang `/server_info` body: flat server args, scheduler info, `version`.
  const serverInfo = {
    model_path: '/models/qwen',
    served_model_name: 'Qwen/Qwen3-8B',
    tp_size: 2,
    dp_size: 1,
    pp_size: 1,
    context_length: 32768,
    max_total_tokens: 0,
    is_embedding: false,
    load_balance_method: 'round_robin',
    weight_version: 'default',
    enable_memory_saver: true,
    internal_states: [{ avg_spec_accept_length: 1 }],
    kv_events: null,
    tokenizer: '',
    version: '0.5.15.post1',
  };

  it('takes the key set where present, the version and no other key', () => {
    expect(labelsFromServerInfo(serverInfo, null)).toEqual({
      served_model_name: 'Qwen/Qwen3-8B',
      tp_size: '2',
      dp_size: '1',
      pp_size: '1',
      context_length: '32768',
      max_total_tokens: '0',
      is_embedding: 'false',
      load_balance_method: 'round_robin',
      weight_version: 'default',
      version: '0.5.15.post1',
    });
  });

  it("takes model info's weight_version over server info's", () => {
    const labels = labelsFromServerInfo(serverInfo, {
      model_path: '/models/qwen',
      is_generation: true,
      weight_version: 'e2e-refit',
      tp_size: 8,
    });
    expect(labels.weight_version).toBe('e2e-refit');
    // Other keys: server info stays authoritative.
    expect(labels.tp_size).toBe('2');
  });

  it('fills keys server info lacks from model info', () => {
    expect(labelsFromServerInfo({}, { weight_version: 3, vocab_size: 151936 })).toEqual({
      weight_version: '3',
      vocab_size: '151936',
    });
  });

  it('copies every rl.* key', () => {
    const labels = labelsFromServerInfo(
      {
        'rl.control_url': 'http://0.0.0.0:40100',
        'rl.pause_modes': 'wait,abort,keep',
        'rl.abort': true,
        'rl.empty': '',
        'rl.nested': { a: 1 },
        rl_not_prefixed: 'x',
      },
      null,
    );
    expect(labels).toEqual({
      'rl.control_url': 'http://0.0.0.0:40100',
      'rl.pause_modes': 'wait,abort,keep',
      'rl.abort': 'true',
    });
  });

  it.each<[Record<string, unknown>, Record<string, string>]>([
    [
      { attn_tp_size: 2, pipeline_parallel_size: 1, data_parallel_size: 4 },
      { tp_size: '2', pp_size: '1', dp_size: '4' },
    ],
    [{ tp_size: 8, attn_tp_size: 2 }, { tp_size: '8' }],
    // A bare TokenSpeed launch: `attn_tp_size` null, so `tp_size` stays absent (its row shows
    // `tp_size: null`).
    [{ attn_tp_size: null, pipeline_parallel_size: 1 }, { pp_size: '1' }],
    [{ tp_size: null, attn_tp_size: 4 }, { tp_size: '4' }],
  ])('folds TokenSpeed parallelism spellings: %j', (info, expected) => {
    expect(labelsFromServerInfo(info, null)).toEqual(expected);
  });

  it('falls back to tokenspeed_version for `version`', () => {
    expect(labelsFromServerInfo({ tokenspeed_version: '0.3.1' }, null)).toEqual({ version: '0.3.1' });
  });
});

describe('foldParallelism', () => {
  it.each<[Record<string, string>, Record<string, string>]>([
    [{ attn_tp_size: '2' }, { attn_tp_size: '2', tp_size: '2' }],
    [
      { attn_tp_size: '2', tp_size: '1' },
      { attn_tp_size: '2', tp_size: '1' },
    ],
    [{ pipeline_parallel_size: '3' }, { pipeline_parallel_size: '3', pp_size: '3' }],
    [
      { data_parallel_size: '4', dp_size: '2' },
      { data_parallel_size: '4', dp_size: '2' },
    ],
    [{}, {}],
  ])('%j → %j', (labels, expected) => {
    const before = { ...labels };
    expect(foldParallelism(labels)).toEqual(expected);
    expect(labels).toEqual(before);
  });
});

describe('sizeLabel', () => {
  it.each<[string | undefined, number | null]>([
    ['1', 1],
    [' 8 ', 8],
    ['08', 8],
    ['0', 0],
    ['+2', 2],
    ['garbage', null],
    ['', null],
    ['  ', null],
    ['-1', null],
    ['1.5', null],
    ['2x', null],
    [undefined, null],
    ['9007199254740991', 9007199254740991],
    ['9007199254740993', null],
  ])('%j → %j', (value, expected) => {
    expect(sizeLabel(value)).toBe(expected);
  });
});

describe('flattenModelInfo (gRPC)', () => {
  it('skips empty strings and zero numbers, keeps booleans, JSON-encodes arrays', () => {
    expect(
      flattenModelInfo({
        model_path: '/models/m',
        tokenizer_path: '',
        served_model_name: 'null',
        is_generation: true,
        supports_vision: false,
        max_context_length: 32768,
        max_req_input_len: 0,
        vocab_size: 0n,
        num_layers: 28n,
        temperature: 0.5,
        eos_token_ids: [151645, 151643],
        architectures: [],
        preferred_sampling_params: null,
        nested: { a: 1 },
        weight_version: 'default',
      }),
    ).toEqual({
      model_path: '/models/m',
      is_generation: 'true',
      supports_vision: 'false',
      max_context_length: '32768',
      num_layers: '28',
      temperature: '0.5',
      eos_token_ids: '[151645,151643]',
      weight_version: 'default',
    });
  });
});
