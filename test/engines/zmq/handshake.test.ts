// Addressing and handshake maps of SMG's ZMQ lane: the FNV-1a-64 handshake port, the sockets a
// worker URL binds, the INIT map and the engine's ready response (named keys, TokenSpeed's
// `prefix_granularity` spelling).

import { describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import {
  decodeEngineReady,
  decodeReadyStatus,
  encodeInit,
  engineIdentity,
  fnv1a64,
  handshakePort,
  laneAddresses,
  rankOf,
} from '../../../src/engines/zmq/handshake.ts';
import { WireError } from '../../../src/engines/zmq/wire.ts';

const packr = new Packr({ useRecords: false });

describe('FNV-1a-64 and the handshake port', () => {
  it.each([
    ['', 0xcbf29ce484222325n],
    ['a', 0xaf63dc4c8601ec8cn],
    ['foobar', 0x85944171f73967e8n],
  ])('fnv1a64(%j)', (text, expected) => {
    expect(fnv1a64(text)).toBe(expected);
  });

  it('maps a path into 20000..29999 from its hash', () => {
    const path = '/run/rlgate/engine-0';
    expect(handshakePort(path)).toBe(20000 + Number(fnv1a64(path) % 10000n));
    expect(handshakePort(path)).toBeGreaterThanOrEqual(20000);
    expect(handshakePort(path)).toBeLessThan(30000);
  });
});

describe('laneAddresses', () => {
  it('derives ipc data-plane sockets and the FNV handshake port from ipc://<path>', () => {
    expect(laneAddresses('ipc:///run/x/e')).toEqual({
      handshake: `tcp://127.0.0.1:${handshakePort('/run/x/e')}`,
      input: 'ipc:///run/x/e-in.sock',
      output: 'ipc:///run/x/e-out.sock',
      ipcPaths: ['/run/x/e-in.sock', '/run/x/e-out.sock'],
    });
  });

  it('takes zmq_handshake_address verbatim (tcp only)', () => {
    expect(laneAddresses('ipc:///run/x/e', 'tcp://127.0.0.1:30500').handshake).toBe('tcp://127.0.0.1:30500');
    expect(() => laneAddresses('ipc:///run/x/e', 'ipc:///run/x/h')).toThrow(/tcp/);
  });

  it('binds tcp:// worker URLs on loopback only, data plane on free ports', () => {
    expect(laneAddresses('tcp://127.0.0.1:4000')).toMatchObject({ handshake: 'tcp://127.0.0.1:4000', input: 'tcp://127.0.0.1:0', ipcPaths: [] });
    expect(() => laneAddresses('tcp://10.0.0.5:4000')).toThrow(/loopback/);
  });

  it.each(['zmq://host:1', 'ipc://relative/path', 'http://127.0.0.1:1'])('refuses %s', (url) => {
    expect(() => laneAddresses(url)).toThrow();
  });
});

describe('identities and maps', () => {
  it('encodes ranks as 2 little-endian bytes', () => {
    expect(engineIdentity(0).toString('hex')).toBe('0000');
    expect(engineIdentity(258).toString('hex')).toBe('0201');
    expect(rankOf(Buffer.from([0x02, 0x01]))).toBe(258);
    expect(rankOf(Buffer.from([1, 2, 3]))).toBeNull();
  });

  it('sends INIT as a named map', () => {
    expect(packr.unpack(encodeInit('ipc:///a-in.sock', 'ipc:///a-out.sock'))).toEqual({
      addresses: {
        inputs: ['ipc:///a-in.sock'],
        outputs: ['ipc:///a-out.sock'],
        coordinator_input: null,
        coordinator_output: null,
        frontend_stats_publish_address: null,
      },
      parallel_config: {},
    });
  });

  it('reads HELLO/READY maps and refuses positional arrays', () => {
    expect(decodeReadyStatus(packr.pack({ status: 'HELLO', local: true, headless: true, parallel_config_hash: null }))).toBe('HELLO');
    expect(() => decodeReadyStatus(packr.pack(['HELLO', true]))).toThrow(WireError);
  });

  it('reads the ready response, with prefix_granularity as block_size', () => {
    const ready = decodeEngineReady(
      packr.pack({
        max_model_len: 131072,
        num_gpu_blocks: 6660,
        prefix_granularity: 64,
        dp_stats_address: null,
        dtype: 'bfloat16',
        vllm_version: 'tokenspeed-0.1.0',
        world_size: 2,
        data_parallel_size: 2,
        max_num_batched_tokens: -1,
        kv_cache_size_tokens: 426176,
      }),
    );
    expect(ready).toMatchObject({
      maxModelLen: 131072,
      blockSize: 64,
      dataParallelSize: 2,
      maxNumBatchedTokens: -1,
      kvCacheSizeTokens: 426176,
      tensorParallelSize: null,
    });
    expect(() => decodeEngineReady(Buffer.alloc(0))).toThrow(WireError);
    expect(() => decodeEngineReady(packr.pack({ dtype: 'bfloat16' }))).toThrow(/max_model_len/);
  });
});
