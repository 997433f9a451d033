// `text` prompts on token engines (issue 4): tokenized with the engine's tokenizer —
// a TokenSpeed engine's own GetTokenizer bundle, else the gateway's `--tokenizer-path` (ZMQ, and
// gRPC engines without one) — and answered with `text` detokenized from `output_ids`, buffered
// and streamed (cumulative). Without any tokenizer, `text` is a 400 naming both fixes. The
// expected ids and text come from the simulator's own byte-level reference, not our tokenizer.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../fixtures/gateway.ts';
import { startTokenEngines, startTokenFleet, type TokenEngines, type TokenFleet } from '../fixtures/token-fleet.ts';
import type { TokenspeedSimProcess } from '../fixtures/tokenspeed-sim.ts';
import type { ZmqSimProcess } from '../fixtures/zmq-sim.ts';
import { bundleChunks, zipStored } from '../../sim/tokenspeed/bundle.ts';
import { BOS_TOKEN_ID, EOS_TOKEN_ID, decode as refDecode, encode as refEncode } from '../../sim/core/tokens.ts';
import { tokenizerFiles } from '../../sim/tokenspeed/tokenizer.ts';
import { loadTokenizerPath, tokenizerFromBundle, TokenizerUnavailable } from '../../src/engines/tokenizer.ts';

const MODEL = 'MODEL';
const TS_ARGS = ['--model', MODEL, '--token-rate', '0'];
const PROMPT = 'hello, wörld';

function sseEvents(text: string): { events: any[]; done: boolean } {
  const datas = text
    .split('\n\n')
    .map((b) => b.trim())
    .filter((b) => b.startsWith('data: '))
    .map((b) => b.slice('data: '.length));
  return { events: datas.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d)), done: datas.at(-1) === '[DONE]' };
}

async function generateInputs(sim: TokenspeedSimProcess): Promise<number[][]> {
  return (await sim.rpcs()).filter((r) => r.rpc === 'Generate').map((r) => r.request.tokenized.input_ids.map(Number));
}

/** The simulator's tokenizer files written as a tokenizer directory (what `--tokenizer-path` names). */
function writeTokenizerDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rlgate-tokenizer-test-'));
  for (const f of tokenizerFiles({ modelName: MODEL, contextLength: 4096 })) writeFileSync(join(dir, f.name), f.content);
  return dir;
}

describe('the tokenizer loaders', () => {
  const files = tokenizerFiles({ modelName: MODEL, contextLength: 4096 });

  it('a GetTokenizer bundle loads (checked, cached by sha256) and encodes/decodes as the engine does', () => {
    const chunks = bundleChunks(zipStored(files), 1000);
    expect(chunks.length).toBeGreaterThan(1);
    const t = tokenizerFromBundle(chunks);
    expect(tokenizerFromBundle(bundleChunks(zipStored(files)))).toBe(t);
    expect(t.encode(PROMPT)).toEqual(refEncode(PROMPT));
    const ids = [BOS_TOKEN_ID, ...refEncode(PROMPT), EOS_TOKEN_ID];
    expect(t.decode(ids, { skipSpecialTokens: true })).toBe(PROMPT);
    expect(t.decode(ids, { skipSpecialTokens: false })).toBe(`<s>${PROMPT}</s>`);
  });

  it('a bundle whose bytes do not hash to the announced sha256 is refused', () => {
    const chunks = bundleChunks(zipStored(files), 1000);
    const bad = chunks.map((c, i) => (i === 0 ? { ...c, data: Buffer.from(c.data).fill(0x20, 40, 60) } : c));
    expect(() => tokenizerFromBundle(bad)).toThrow(/sha256/);
    expect(() => tokenizerFromBundle(chunks.map((c) => ({ ...c, sha256: '' })))).toThrow(TokenizerUnavailable);
  });

  it('a directory loads; a directory without tokenizer.json is TokenizerUnavailable', async () => {
    const dir = writeTokenizerDir();
    const empty = mkdtempSync(join(tmpdir(), 'rlgate-tokenizer-empty-'));
    try {
      expect((await loadTokenizerPath(dir)).encode(PROMPT)).toEqual(refEncode(PROMPT));
      await expect(loadTokenizerPath(empty)).rejects.toThrow(/tokenizer\.json/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

describe('text on a TokenSpeed engine with its own tokenizer (GetTokenizer)', () => {
  let fleet: TokenFleet;
  let t: TestGateway;
  let sim: TokenspeedSimProcess;

  beforeAll(async () => {
    fleet = await startTokenFleet({ tokenspeed: [TS_ARGS] });
    ({
      t,
      ts: [sim],
    } = fleet);
  }, 60_000);
  afterAll(() => fleet?.close());

  it('buffered: the engine gets the tokenizer ids, `text` is the decode of `output_ids`', async () => {
    await sim.clearRecords();
    const r = await t.http('POST', '/generate', { body: { text: PROMPT, sampling_params: { max_new_tokens: 6 } } });
    expect(r.status, r.text).toBe(200);
    expect(await generateInputs(sim)).toEqual([refEncode(PROMPT)]);
    expect(r.json.output_ids).toHaveLength(6);
    expect(r.json.text).not.toBe('');
    expect(r.json.text).toBe(refDecode(r.json.output_ids));
    expect(r.json.meta_info.prompt_tokens).toBe(refEncode(PROMPT).length);
    // GetTokenizer was asked once, however many requests followed.
    await t.http('POST', '/generate', { body: { text: 'again', sampling_params: { max_new_tokens: 2 } } });
    expect((await sim.rpcs()).filter((c) => c.rpc === 'GetTokenizer')).toHaveLength(1);
  });

  it('an `input_ids` prompt is answered with its detokenized `text` too', async () => {
    const r = await t.http('POST', '/generate', { body: { input_ids: [5, 6, 7], sampling_params: { max_new_tokens: 4 } } });
    expect(r.status).toBe(200);
    expect(r.json.text).toBe(refDecode(r.json.output_ids));
    expect(r.json.text).toHaveLength(4);
  });

  it('streamed: every event carries the cumulative `text`, each extending the one before', async () => {
    const r = await t.http('POST', '/generate', { body: { text: PROMPT, stream: true, sampling_params: { max_new_tokens: 8 } } });
    expect(r.status).toBe(200);
    const { events, done } = sseEvents(r.text);
    expect(done).toBe(true);
    expect(events.length).toBeGreaterThanOrEqual(2);
    let prev = '';
    for (const e of events) {
      expect(e.text.startsWith(prev)).toBe(true);
      expect(e.text).toBe(refDecode(e.output_ids));
      prev = e.text;
    }
    expect(events.at(-1).output_ids).toHaveLength(8);
    expect(prev).toHaveLength(8);
  });

  it('a list of texts and text with input_ids are refused before the engine is called', async () => {
    await sim.clearRecords();
    const list = await t.http('POST', '/generate', { body: { text: ['a', 'b'] } });
    expect([400, 422]).toContain(list.status);
    const both = await t.http('POST', '/generate', { body: { text: 'a', input_ids: [1] } });
    expect(both.status).toBe(400);
    expect(both.json.message).toContain('either `text` or `input_ids`');
    expect(await generateInputs(sim)).toEqual([]);
  });
});

describe('text without an engine tokenizer: --tokenizer-path, else a 400', () => {
  let engines: TokenEngines;
  let bare: TokenspeedSimProcess;
  let zmq: ZmqSimProcess | undefined;
  let ipc: { url: string };
  let dir: string;

  beforeAll(async () => {
    dir = writeTokenizerDir();
    engines = await startTokenEngines({ tokenspeed: [[...TS_ARGS, '--no-tokenizer']], zmq: { model: MODEL } });
    ({
      zmq,
      ts: [bare],
    } = engines);
    ipc = zmq!; // the lane's URL, the one the worker is registered under
  }, 60_000);
  afterAll(async () => {
    await engines?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const zmqRegistration = () => engines.registration.zmq!;

  it('no GetTokenizer and no --tokenizer-path: 400 naming both fixes; input_ids still works with text ""', async () => {
    const t = await startTestGateway();
    try {
      await t.register([{ url: bare.url, runtime_type: 'tokenspeed' }]);
      await bare.clearRecords();
      const r = await t.http('POST', '/generate', { body: { text: PROMPT, sampling_params: { max_new_tokens: 3 } } });
      expect(r.status).toBe(400);
      expect(r.json.error).toBe('invalid_request');
      expect(r.json.message).toContain('--tokenizer-path');
      expect(r.json.message).toContain('GetTokenizer');
      expect(await generateInputs(bare)).toEqual([]);
      const ids = await t.http('POST', '/generate', { body: { input_ids: [5, 6], sampling_params: { max_new_tokens: 3 } } });
      expect(ids.status).toBe(200);
      expect(ids.json.text).toBe('');
      expect(ids.json.output_ids).toHaveLength(3);
    } finally {
      await t.close();
    }
  });

  it('ZMQ without --tokenizer-path: 400 too', async () => {
    const t = await startTestGateway();
    try {
      await t.register([zmqRegistration()]);
      const r = await t.http('POST', '/generate', { body: { text: PROMPT, sampling_params: { max_new_tokens: 3 } } });
      expect(r.status).toBe(400);
      expect(r.json.message).toContain('--tokenizer-path');
    } finally {
      await t.close();
    }
  });

  it('with --tokenizer-path: ZMQ and the tokenizer-less gRPC engine both take text', async () => {
    const t = await startTestGateway({ tokenizerPath: dir });
    try {
      await t.register([zmqRegistration(), { url: bare.url, runtime_type: 'tokenspeed' }]);
      await bare.clearRecords();
      const seen = new Set<string>();
      for (let i = 0; i < 4; i++) {
        const r = await t.http('POST', '/generate', { body: { text: PROMPT, sampling_params: { max_new_tokens: 5 } } });
        expect(r.status, r.text).toBe(200);
        expect(r.json.text).toBe(refDecode(r.json.output_ids));
        expect(r.json.text).toHaveLength(5);
        seen.add(String(r.headers['x-smg-routed-worker-id']));
      }
      expect([...seen].sort()).toEqual([ipc.url, bare.url].sort());
      const zmqInputs = (await zmq!.requests()).map((a) => a.inputIds);
      expect(zmqInputs.length).toBeGreaterThan(0);
      for (const ids of zmqInputs) expect(ids).toEqual(refEncode(PROMPT));
      const grpcInputs = await generateInputs(bare);
      expect(grpcInputs.length).toBeGreaterThan(0);
      for (const ids of grpcInputs) expect(ids).toEqual(refEncode(PROMPT));

      const s = await t.http('POST', '/generate', { body: { text: PROMPT, stream: true, sampling_params: { max_new_tokens: 6 } } });
      const { events, done } = sseEvents(s.text);
      expect(done).toBe(true);
      let prev = '';
      for (const e of events) {
        expect(e.text.startsWith(prev)).toBe(true);
        prev = e.text;
      }
      expect(prev).toBe(refDecode(events.at(-1).output_ids));
      expect(prev).toHaveLength(6);
    } finally {
      await t.close();
    }
  });
});
