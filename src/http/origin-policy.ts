// Which browser origins may write to the gateway, and the CORS headers they get. Pure: no
// fastify here (write-guard.ts applies it). A request without `Origin` is not a browser's
// cross-origin call (curl, SDKs, trainers) and is never judged by this policy; the gateway's own
// page at /ui is same-origin and always allowed.

/** The operator's `--allowed-origins`, normalised; `*` allows every origin. */
export interface AllowedOrigins {
  any: boolean;
  origins: ReadonlySet<string>;
}

/**
 * Normalises each entry to its serialised origin (`https://dash.example.com`, default port
 * dropped, host lower-cased). An entry with a path, query, userinfo or a scheme other than
 * http(s) is an error: an origin is only scheme, host and port, and a typo must not silently
 * allow nothing.
 */
export function parseAllowedOrigins(entries: readonly string[]): AllowedOrigins {
  const origins = new Set<string>();
  let any = false;
  for (const raw of entries) {
    const entry = raw.trim();
    if (entry === '') continue;
    if (entry === '*') {
      any = true;
      continue;
    }
    let url: URL;
    try {
      url = new URL(entry);
    } catch {
      throw new Error(`\`${entry}\` is not an origin (expected scheme://host[:port], or *)`);
    }
    const bare = url.pathname === '/' && url.search === '' && url.hash === '' && url.username === '' && url.password === '';
    if (!['http:', 'https:'].includes(url.protocol) || !bare) {
      throw new Error(`\`${entry}\` is not an origin (expected scheme://host[:port] with no path, or *)`);
    }
    origins.add(url.origin);
  }
  return { any, origins };
}

/**
 * Whether a request carrying `Origin: origin` may act. Same-origin (the origin names the host the
 * request was sent to, as `Host` says) is always allowed: that is the gateway's own page. `null`
 * (sandboxed frames, some redirects) matches only `*`.
 */
export function originAllowed(policy: AllowedOrigins, origin: string, host: string | undefined): boolean {
  if (policy.any) return true;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  if (url.origin === 'null') return false;
  if (policy.origins.has(url.origin)) return true;
  return host !== undefined && sameHost(url, host);
}

/** `Host` read with the origin's scheme, so `gw:80` and `http://gw` (default port) agree. */
function sameHost(origin: URL, host: string): boolean {
  try {
    return new URL(`${origin.protocol}//${host}`).host === origin.host;
  } catch {
    return false;
  }
}

/** What `access-control-allow-origin` says to an allowed origin: `*` when every origin is. */
export function allowOriginValue(policy: AllowedOrigins, origin: string): string {
  return policy.any ? '*' : origin;
}

const PREFLIGHT_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE';
/** Preflight answers may be cached this long (seconds); browsers cap it lower anyway. */
const PREFLIGHT_MAX_AGE = '600';
const HEADER_LIST = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+(\s*,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*$/;

/**
 * Headers of the answer to an allowed origin's preflight. The request headers it asks for are
 * allowed as asked (content-type, authorization, the version-policy and trace headers are all
 * the gateway's API); a malformed list is left out, so the browser refuses the call.
 */
export function preflightHeaders(policy: AllowedOrigins, origin: string, requestedHeaders: string | undefined): Record<string, string> {
  const out: Record<string, string> = {
    'access-control-allow-origin': allowOriginValue(policy, origin),
    'access-control-allow-methods': PREFLIGHT_METHODS,
    'access-control-max-age': PREFLIGHT_MAX_AGE,
  };
  const asked = requestedHeaders?.trim();
  if (asked && HEADER_LIST.test(asked)) out['access-control-allow-headers'] = asked;
  if (!policy.any) out.vary = 'Origin, Access-Control-Request-Headers';
  return out;
}
