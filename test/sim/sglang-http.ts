// Small HTTP and polling helpers shared by the simulator integration tests: one call returns
// status, headers and body text together, and `until` polls a condition instead of sleeping.

export interface Reply {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

export async function call(url: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
  }
  const r = await fetch(`${url}${path}`, init);
  const text = await r.text();
  let json: any;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: r.status, headers: r.headers, text, json };
}

export const post = (url: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Reply> => call(url, 'POST', path, body, headers);
export const get = (url: string, path: string, headers?: Record<string, string>): Promise<Reply> => call(url, 'GET', path, undefined, headers);

/** Polls `check` until it returns a truthy value (returned), failing after `timeoutMs`. */
export async function until<T>(check: () => Promise<T | null | undefined | false>, what: string, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    last = await check();
    if (last) return last as T;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 15));
  }
}

/** Wraps a promise so a test can ask whether it has settled yet. */
export function track<T>(p: Promise<T>): { promise: Promise<T>; settled: () => boolean } {
  let settled = false;
  const promise = p.finally(() => {
    settled = true;
  });
  return { promise, settled: () => settled };
}
