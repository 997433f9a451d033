// Token ids as the approximate token tree keys them: the whole 16-token pages of a prompt (SGLang's
// radix cache page; a shorter tail is never cached, so it never matches), each token written as
// two UTF-16 code units so that a page is one fixed-width string.

/** Tokens per page (SGLang's default radix cache page). */
export const PAGE_TOKENS = 16;
/** Code units of one encoded page. */
export const PAGE_UNITS = PAGE_TOKENS * 2;

/** The prompt's whole pages, encoded. */
export function pagesOf(tokens: readonly number[]): string {
  const n = tokens.length - (tokens.length % PAGE_TOKENS);
  let out = '';
  for (let i = 0; i < n; i++) {
    const t = tokens[i]! >>> 0;
    out += String.fromCharCode(t >>> 16, t & 0xffff);
  }
  return out;
}

/** Tokens in `units` code units of encoded pages. */
export function tokensIn(units: number): number {
  return units / 2;
}
