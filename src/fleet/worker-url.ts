// The rules a worker URL must meet before it is registered, and so before the gateway ever
// connects to it: a scheme of a wire we speak, no userinfo (it would be listed to anyone), no
// query or fragment (engines are addressed by host, port and path only), a host of valid syntax
// and length, no dot segments, and no link-local or cloud-metadata address (the gateway would
// probe it: SSRF) unless the operator's `--allowed-worker-hosts` allows it. Pure: no DNS lookup,
// so the rules see the URL's literal host; a name that resolves to a refused address is only
// kept out by an allow-list.

import { BlockList, isIP, isIPv6 } from 'node:net';
import { GatewayError } from '../api/errors.ts';
import { baseUrlOf } from './worker.ts';
import type { ConnectionMode } from '../wire/worker-entry.ts';

/** Longest host name (RFC 1035: 253 characters written out) and longest label in it. */
export const MAX_HOST_LENGTH = 253;
export const MAX_HOST_LABEL_LENGTH = 63;

/** The URL schemes each wire takes (docs/grpc-workers.md for the gRPC and ZMQ forms). */
export const WIRE_SCHEMES: Readonly<Record<ConnectionMode, readonly string[]>> = Object.freeze({
  http: ['http', 'https'],
  grpc: ['grpc', 'grpcs'],
  zmq: ['ipc', 'tcp'],
});

/** Why a URL is refused: the `reason` field of the 400. */
export type UrlRefusal = 'scheme' | 'userinfo' | 'query' | 'fragment' | 'host' | 'port' | 'path' | 'link_local' | 'metadata' | 'not_allowed';

/** Cloud instance-metadata endpoints (AWS, GCP, Azure, Alibaba): never an engine. */
const METADATA_NAMES = new Set(['metadata.google.internal']);
const METADATA_ADDRESSES = new BlockList();
METADATA_ADDRESSES.addAddress('169.254.169.254', 'ipv4');
METADATA_ADDRESSES.addAddress('100.100.100.200', 'ipv4');
METADATA_ADDRESSES.addAddress('fd00:ec2::254', 'ipv6');
const LINK_LOCAL = new BlockList();
LINK_LOCAL.addSubnet('169.254.0.0', 16, 'ipv4');
LINK_LOCAL.addSubnet('fe80::', 10, 'ipv6');

export interface ParsedWorkerUrl {
  mode: ConnectionMode;
  /**
   * Lower-case host with IPv4 numbers in dotted form (an IPv4-mapped IPv6 address too) and IPv6
   * without brackets; '' for ipc://.
   */
  host: string;
  /**
   * The one spelling of the URL: scheme and host as above, the port without leading zeros, no
   * trailing slash, the DP rank kept. `HTTP://127.1:8000/` and `http://127.0.0.1:8000` are one
   * engine; the registry keys workers by it.
   */
  canonical: string;
}

/** `--allowed-worker-hosts`, compiled: exact names, `*.suffix` names, addresses and CIDRs. */
export interface AllowedHosts {
  names: ReadonlySet<string>;
  suffixes: readonly string[];
  addresses: BlockList;
  /** The entries as given, for messages. */
  entries: readonly string[];
}

function refuse(reason: UrlRefusal, message: string, extra: Record<string, string> = {}): GatewayError {
  return new GatewayError('invalid_request', message, { field: 'url', reason, ...extra });
}

const SHAPE = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/;
const LABEL = /^[a-zA-Z0-9_](?:[a-zA-Z0-9_-]*[a-zA-Z0-9_])?$/;

/**
 * The syntax rules (everything but the host policy). Messages never repeat the URL: it may carry
 * a password, or be kilobytes long.
 */
export function parseWorkerUrl(raw: string): ParsedWorkerUrl {
  // eslint-disable-next-line no-control-regex -- control characters are what is refused
  if (/[\s\u0000-\u001f\u007f\\]/.test(raw)) throw refuse('host', 'url must not contain whitespace, control characters or backslashes');
  // `http://h:1@3` is DP rank 3 of `http://h:1` (SMG's form), not userinfo.
  const { baseUrl, dpRank } = baseUrlOf(raw.trim().replace(/\/+$/, ''));
  const m = SHAPE.exec(baseUrl);
  if (!m) throw refuse('scheme', 'url must be <scheme>://<host>[:port][/path]');
  const scheme = m[1]!.toLowerCase();
  const mode = (Object.keys(WIRE_SCHEMES) as ConnectionMode[]).find((k) => WIRE_SCHEMES[k].includes(scheme));
  if (!mode) throw refuse('scheme', 'url must start with http://, https://, grpc://, grpcs://, ipc:// or tcp://');
  if (m[4] !== undefined || raw.includes('?')) throw refuse('query', 'url must not carry a query (`?...`)');
  if (m[5] !== undefined || raw.includes('#')) throw refuse('fragment', 'url must not carry a fragment (`#...`)');
  const authority = m[2]!;
  if (authority.includes('@')) throw refuse('userinfo', 'url must not carry a user name or password (`user:pass@`): the registry lists URLs to anyone');
  checkPath(m[3]!);
  const rank = dpRank === null ? '' : `@${dpRank}`;
  if (scheme === 'ipc') {
    if (authority !== '') throw refuse('path', 'a ZMQ url must be ipc://<absolute path>');
    return { mode, host: '', canonical: `ipc://${m[3]!}${rank}` };
  }
  const { host, port } = canonicalHost(authority);
  const written = isIPv6(host) ? `[${host}]` : host;
  return { mode, host, canonical: `${scheme}://${written}${port === undefined ? '' : `:${port}`}${m[3]!}${rank}` };
}

/** No `.`/`..` segment, plain or percent-encoded: a path goes to one engine, never above it. */
function checkPath(path: string): void {
  for (const segment of path.split('/')) {
    const decoded = segment.replace(/%2e/gi, '.');
    if (decoded === '.' || decoded === '..') throw refuse('path', 'url path must not contain `.` or `..` segments');
  }
}

/** Host syntax and length, the port, and the host as the WHATWG parser reads it. */
function canonicalHost(authority: string): { host: string; port: string | undefined } {
  let host: string;
  let port: string | undefined;
  const v6 = /^\[([^\]]*)\](?::(.*))?$/.exec(authority);
  if (v6) {
    if (!isIPv6(v6[1]!)) throw refuse('host', 'url host in brackets must be an IPv6 address');
    host = v6[1]!;
    port = v6[2];
  } else {
    const i = authority.lastIndexOf(':');
    host = i < 0 ? authority : authority.slice(0, i);
    port = i < 0 ? undefined : authority.slice(i + 1);
    const name = host.endsWith('.') ? host.slice(0, -1) : host;
    if (name.length === 0) throw refuse('host', 'url must name a host');
    if (name.length > MAX_HOST_LENGTH) throw refuse('host', `url host must be at most ${MAX_HOST_LENGTH} characters`, { limit: String(MAX_HOST_LENGTH) });
    for (const label of name.split('.')) {
      if (label.length > MAX_HOST_LABEL_LENGTH)
        throw refuse('host', `each dot-separated label of the url host must be at most ${MAX_HOST_LABEL_LENGTH} characters`);
      if (!LABEL.test(label))
        throw refuse('host', 'url host must be a name of letters, digits, `-` and `_` in dot-separated labels, an IPv4 address or a bracketed IPv6 address');
    }
  }
  if (port !== undefined && !(/^[0-9]{1,5}$/.test(port) && Number(port) >= 1 && Number(port) <= 65535)) {
    throw refuse('port', 'url port must be 1..65535');
  }
  // The WHATWG reading is the one undici and grpc-js connect to (`2852039166` is 169.254.169.254).
  let hostname: string;
  try {
    hostname = new URL(`http://${v6 ? `[${host}]` : host}`).hostname;
  } catch {
    throw refuse('host', 'url host is not valid');
  }
  const canonical = unmapped(
    hostname
      .replace(/^\[|\]$/g, '')
      .replace(/\.$/, '')
      .toLowerCase(),
  );
  return { host: canonical, port: port === undefined || port === '' ? undefined : String(Number(port)) };
}

/** `::ffff:7f00:1` (an IPv4-mapped IPv6 address, as WHATWG writes it) → `127.0.0.1`: one host, one spelling. */
function unmapped(host: string): string {
  const m = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
  if (!m) return host;
  const hi = parseInt(m[1]!, 16);
  const lo = parseInt(m[2]!, 16);
  return `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
}

/**
 * The host policy. Without an allow-list: every host but link-local and metadata addresses
 * (loopback and private ranges are how fleets and tests run). With one: only the hosts it
 * names, which may then be link-local or metadata addresses.
 */
export function checkWorkerHost(parsed: ParsedWorkerUrl, allowed: AllowedHosts | null): void {
  if (parsed.mode === 'zmq' && parsed.host === '') return; // ipc://: a socket file on this host
  const host = parsed.host;
  const family = isIP(host) === 6 ? 'ipv6' : isIP(host) === 4 ? 'ipv4' : null;
  if (allowed && allowed.entries.length > 0) {
    const ok = family ? allowed.addresses.check(host, family) : allowed.names.has(host) || allowed.suffixes.some((s) => host.endsWith(s));
    if (!ok) throw refuse('not_allowed', `url host \`${host}\` is not in --allowed-worker-hosts`, { host });
    return;
  }
  if (family ? METADATA_ADDRESSES.check(host, family) : METADATA_NAMES.has(host)) {
    throw refuse('metadata', `url host \`${host}\` is a cloud metadata endpoint; --allowed-worker-hosts can allow it`, { host });
  }
  if (family && LINK_LOCAL.check(host, family)) {
    throw refuse('link_local', `url host \`${host}\` is link-local; --allowed-worker-hosts can allow it`, { host });
  }
}

/** Syntax and host policy: what a registration from outside must pass. */
export function checkWorkerUrl(raw: string, allowed: AllowedHosts | null): ParsedWorkerUrl {
  const parsed = parseWorkerUrl(raw);
  checkWorkerHost(parsed, allowed);
  return parsed;
}

/**
 * Compiles `--allowed-worker-hosts` entries: `10.0.0.0/8`, `fd00::/8`, `169.254.169.254`,
 * `[fe80::1]`, `engine-3.internal` or `*.engines.internal`. Throws an Error naming a bad entry.
 */
export function compileAllowedHosts(entries: readonly string[]): AllowedHosts {
  const names = new Set<string>();
  const suffixes: string[] = [];
  const addresses = new BlockList();
  for (const given of entries) {
    const e = given
      .trim()
      .toLowerCase()
      .replace(/^\[|\]$/g, '');
    const cidr = /^([^/]+)\/(\d{1,3})$/.exec(e);
    if (cidr) {
      const family = isIP(cidr[1]!);
      const prefix = Number(cidr[2]);
      if (family === 0 || prefix > (family === 4 ? 32 : 128)) throw new Error(`--allowed-worker-hosts: \`${given}\` is not a valid CIDR`);
      addresses.addSubnet(cidr[1]!, prefix, family === 4 ? 'ipv4' : 'ipv6');
    } else if (isIP(e) !== 0) {
      addresses.addAddress(e, isIP(e) === 4 ? 'ipv4' : 'ipv6');
    } else {
      const wildcard = e.startsWith('*.');
      const name = (wildcard ? e.slice(2) : e).replace(/\.$/, '');
      const valid = name.length > 0 && name.length <= MAX_HOST_LENGTH && name.split('.').every((l) => l.length <= MAX_HOST_LABEL_LENGTH && LABEL.test(l));
      if (!valid) throw new Error(`--allowed-worker-hosts: \`${given}\` is not a host name, address, CIDR or *.suffix`);
      if (wildcard) suffixes.push(`.${name}`);
      else names.add(name);
    }
  }
  return { names, suffixes, addresses, entries: [...entries] };
}

const compiled = new WeakMap<readonly string[], AllowedHosts>();

/** The compiled allow-list of a config's entries, compiled once per list. */
export function allowedHostsOf(entries: readonly string[]): AllowedHosts | null {
  if (entries.length === 0) return null;
  let c = compiled.get(entries);
  if (!c) compiled.set(entries, (c = compileAllowedHosts(entries)));
  return c;
}
