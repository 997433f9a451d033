// The simulator's tokenizer (sim/core/tokens.ts: one token per UTF-8 byte, id = byte + 3;
// 0/1/2 are <pad>/<s>/</s>) written out as a real Hugging Face file set (tokenizer.json as a
// byte-level BPE with no merges, tokenizer_config.json, config.json, …) that GetTokenizer
// streams. Pure: it never touches the network.

import { BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID, TOKEN_OFFSET, VOCAB_SIZE } from '../core/tokens.ts';

const SPECIAL = [
  { id: PAD_TOKEN_ID, content: '<pad>' },
  { id: BOS_TOKEN_ID, content: '<s>' },
  { id: EOS_TOKEN_ID, content: '</s>' },
];

/**
 * GPT-2's byte → printable character map (what the ByteLevel pre-tokenizer and decoder use), so
 * the vocabulary in tokenizer.json has one entry per byte and a standard loader reproduces
 * `encode` exactly.
 */
function byteToUnicode(): string[] {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const map = new Array<string>(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    map[b] = printable.includes(b) ? String.fromCharCode(b) : String.fromCharCode(256 + extra++);
  }
  return map;
}

export interface TokenizerFacts {
  modelName: string;
  contextLength: number;
}

const CHAT_TEMPLATE =
  "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}" + '{% if add_generation_prompt %}<|assistant|>\n{% endif %}';

/** The tokenizer directory's files, name → content, in a fixed order (the bundle is stable). */
export function tokenizerFiles(facts: TokenizerFacts): Array<{ name: string; content: Buffer }> {
  const vocab: Record<string, number> = {};
  for (const s of SPECIAL) vocab[s.content] = s.id;
  const chars = byteToUnicode();
  for (let b = 0; b < 256; b++) vocab[chars[b]] = b + TOKEN_OFFSET;
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false };
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: SPECIAL.map((s) => ({
      id: s.id,
      content: s.content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: null,
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  };
  const tokenizerConfig = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    bos_token: '<s>',
    eos_token: '</s>',
    pad_token: '<pad>',
    add_bos_token: false,
    add_eos_token: false,
    clean_up_tokenization_spaces: false,
    model_max_length: facts.contextLength,
    chat_template: CHAT_TEMPLATE,
  };
  const config = {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    _name_or_path: facts.modelName,
    vocab_size: VOCAB_SIZE,
    bos_token_id: BOS_TOKEN_ID,
    eos_token_id: EOS_TOKEN_ID,
    pad_token_id: PAD_TOKEN_ID,
    max_position_embeddings: facts.contextLength,
    torch_dtype: 'bfloat16',
  };
  const json = (v: unknown): Buffer => Buffer.from(`${JSON.stringify(v, null, 2)}\n`);
  return [
    { name: 'config.json', content: json(config) },
    { name: 'generation_config.json', content: json({ bos_token_id: BOS_TOKEN_ID, eos_token_id: EOS_TOKEN_ID, pad_token_id: PAD_TOKEN_ID }) },
    { name: 'special_tokens_map.json', content: json({ bos_token: '<s>', eos_token: '</s>', pad_token: '<pad>' }) },
    { name: 'tokenizer.json', content: json(tokenizerJson) },
    { name: 'tokenizer_config.json', content: json(tokenizerConfig) },
  ];
}
