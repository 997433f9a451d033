// Masks the credentials of a server URL (or a comma-separated list of them) before it is logged,
// printed or put in an error: `nats://user:pass@host:4222` → `nats://***@host:4222`. It never
// parses for correctness: when in doubt it masks more (a host name) rather than less (a password).

const SCHEME = /[a-z][a-z0-9+.-]*:\/\//gi;

/**
 * Userinfo is everything between a `scheme://` (or the start of the text) and the last `@` before
 * the next `scheme://`. Passwords may hold `,`, `/` or `:` unencoded: cutting at the last `@` of
 * a server's stretch keeps them inside the masked part, where a URL parser would cut at the first.
 */
export function redactUrl(text: string): string {
  const starts: number[] = [];
  for (const m of text.matchAll(SCHEME)) starts.push(m.index!);
  if (starts[0] !== 0) starts.unshift(0);
  let out = '';
  for (let i = 0; i < starts.length; i++) {
    const chunk = text.slice(starts[i], starts[i + 1] ?? text.length);
    const scheme = chunk.match(/^[a-z][a-z0-9+.-]*:\/\//i)?.[0] ?? '';
    const at = chunk.lastIndexOf('@');
    out += at < scheme.length ? chunk : `${scheme}***${chunk.slice(at)}`;
  }
  return out;
}
