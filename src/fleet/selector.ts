// The label selector language: `k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, with `,`
// as AND. A hand-written scanner whose errors carry the UTF-8 byte offset where parsing failed,
// and exact-match evaluation against a label view. Never builds the view (fleet code does).

import { GatewayError } from '../api/errors.ts';
import { hasWhiteSpace, trimWhiteSpace } from './versions.ts';

export type SelectorOp = '=' | '!=' | 'in' | 'notin';

export interface Term {
  key: string;
  op: SelectorOp;
  /** One value for `=` / `!=`, one or more for `in` / `notin`. */
  values: string[];
}

export interface Selector {
  /** The text that was parsed. */
  text: string;
  terms: Term[];
}

export class SelectorSyntaxError extends Error {
  override readonly name = 'SelectorSyntaxError';
  constructor(
    /** Byte offset into the parsed text (UTF-8), where the scanner stopped. */
    readonly offset: number,
    readonly reason: string,
  ) {
    super(`invalid selector at byte ${offset}: ${reason}`);
  }
}

// Whitespace is Unicode White_Space (Rust `char::is_whitespace`), as in SMG's scanner.
const isWs = (c: string): boolean => hasWhiteSpace(c);
const KEY_CHAR = /[A-Za-z0-9_./-]/;

class Scanner {
  pos = 0; // UTF-16 index; converted to a byte offset only when reporting an error
  constructor(readonly src: string) {}

  fail(reason: string): never {
    throw new SelectorSyntaxError(Buffer.byteLength(this.src.slice(0, this.pos), 'utf8'), reason);
  }

  peek(): string | undefined {
    if (this.pos >= this.src.length) return undefined;
    const cp = this.src.codePointAt(this.pos)!;
    return String.fromCodePoint(cp);
  }

  bump(): string | undefined {
    const c = this.peek();
    if (c !== undefined) this.pos += c.length;
    return c;
  }

  atEnd(): boolean {
    return this.pos >= this.src.length;
  }

  skipWs(): void {
    while (this.peek() !== undefined && isWs(this.peek()!)) this.bump();
  }

  eat(lit: string): boolean {
    if (!this.src.startsWith(lit, this.pos)) return false;
    this.pos += lit.length;
    return true;
  }

  key(): string {
    const start = this.pos;
    while (this.peek() !== undefined && KEY_CHAR.test(this.peek()!)) this.bump();
    if (this.pos === start) this.fail('expected key');
    return this.src.slice(start, this.pos);
  }

  op(): SelectorOp {
    if (this.eat('!=')) return '!=';
    if (this.eat('=')) {
      if (this.peek() === '=') this.fail('expected value after `=`');
      return '=';
    }
    if (this.wordOp('notin')) return 'notin';
    if (this.wordOp('in')) return 'in';
    return this.fail('expected operator (`=`, `!=`, `in`, `notin`)');
  }

  /** `in` / `notin` count as operators only when followed by whitespace or `(`. */
  wordOp(word: 'in' | 'notin'): boolean {
    if (!this.src.startsWith(word, this.pos)) return false;
    const after = this.src.codePointAt(this.pos + word.length);
    if (after === undefined) return false;
    const c = String.fromCodePoint(after);
    if (c !== '(' && !isWs(c)) return false;
    this.pos += word.length;
    return true;
  }

  value(): string {
    if (this.peek() === '"') return this.quoted();
    const start = this.pos;
    for (let c = this.peek(); c !== undefined; c = this.peek()) {
      if (isWs(c) || c === ',' || c === '(' || c === ')' || c === '"') break;
      this.bump();
    }
    if (this.pos === start) this.fail('expected value');
    return this.src.slice(start, this.pos);
  }

  /** A double-quoted value; the only escapes are `\"` and `\\`. */
  quoted(): string {
    this.bump();
    let out = '';
    for (;;) {
      const c = this.bump();
      if (c === undefined) return this.fail('unterminated quoted value');
      if (c === '"') return out;
      if (c === '\\') {
        const e = this.bump();
        if (e !== '"' && e !== '\\') return this.fail('invalid escape in quoted value');
        out += e;
      } else {
        out += c;
      }
    }
  }

  valueList(): string[] {
    this.skipWs();
    if (!this.eat('(')) this.fail('expected `(`');
    const values: string[] = [];
    for (;;) {
      this.skipWs();
      values.push(this.value());
      this.skipWs();
      if (this.eat(')')) return values;
      if (!this.eat(',')) this.fail('expected `,` or `)`');
    }
  }

  term(): Term {
    this.skipWs();
    const key = this.key();
    this.skipWs();
    const op = this.op();
    if (op === 'in' || op === 'notin') return { key, op, values: this.valueList() };
    this.skipWs();
    return { key, op, values: [this.value()] };
  }
}

/** Parse a selector (SMG's grammar). Throws `SelectorSyntaxError` with the byte offset of the problem. */
export function parseSelector(text: string): Selector {
  const sc = new Scanner(text);
  const terms: Term[] = [];
  for (;;) {
    terms.push(sc.term());
    sc.skipWs();
    if (sc.atEnd()) break;
    if (!sc.eat(',')) sc.fail('expected `,` or end of selector');
    sc.skipWs();
    if (sc.atEnd()) sc.fail('expected key after `,`');
  }
  return { text, terms };
}

/**
 * The `selector` query parameter of fan-outs and fleet writes: absent or blank →
 * `selector_required`; otherwise trimmed and parsed, a syntax error → `invalid_selector` with
 * the byte offset into the trimmed text.
 */
export function selectorFromQuery(raw: string | undefined): Selector {
  const text = trimWhiteSpace(raw ?? '');
  if (text.length === 0) {
    throw new GatewayError('selector_required', 'a non-empty `selector` query parameter is required');
  }
  try {
    return parseSelector(text);
  } catch (err) {
    if (!(err instanceof SelectorSyntaxError)) throw err;
    throw new GatewayError('invalid_selector', err.message, { offset: err.offset });
  }
}

/**
 * Every term must hold, by exact string equality. A missing key makes `=` and `in`
 * false and `!=` and `notin` true. Only own string properties count, so `constructor=x` cannot
 * match an inherited member of the view object.
 */
export function matchesSelector(sel: Selector, view: Record<string, string | undefined>): boolean {
  for (const t of sel.terms) {
    const own = Object.hasOwn(view, t.key) ? view[t.key] : undefined;
    const actual = typeof own === 'string' ? own : undefined;
    const hit = actual !== undefined && t.values.includes(actual);
    const holds = t.op === '=' || t.op === 'in' ? hit : !hit;
    if (!holds) return false;
  }
  return true;
}
