// rlgate's NATS client settings (a server list, one kind of credential, TLS files, the inbox
// prefix) translated into nats.js v3 connect options. It reads the files it is pointed at and
// nothing else; its errors name settings, files and servers with credentials masked, never a
// credential itself.

import { readFileSync } from 'node:fs';
import {
  credsAuthenticator,
  nkeyAuthenticator,
  nkeys,
  tokenAuthenticator,
  usernamePasswordAuthenticator,
  type Authenticator,
  type TlsOptions,
} from '@nats-io/transport-node';
import { redactUrl } from '../obs/redact-url.ts';

/**
 * How a client proves who it is, checks the server, and where its replies come. Files, never
 * secrets (but URL userinfo).
 */
export interface NatsAuthSettings {
  user: string | undefined;
  passwordFile: string | undefined;
  tokenFile: string | undefined;
  /** A file holding a user nkey seed (`SU…`). */
  nkeySeedFile: string | undefined;
  /** A `.creds` file: user JWT and seed (operator/JWT mode). */
  credsFile: string | undefined;
  tlsCa: string | undefined;
  tlsCert: string | undefined;
  tlsKey: string | undefined;
  /**
   * First tokens of every reply subject (request inboxes, JetStream and KV deliveries) instead of
   * `_INBOX`: a server that lets each user subscribe to its own prefix only keeps the replies meant
   * for one user (the workers bucket's, with API keys) from every other.
   */
  inboxPrefix: string | undefined;
}

export function noNatsAuth(): NatsAuthSettings {
  return {
    user: undefined,
    passwordFile: undefined,
    tokenFile: undefined,
    nkeySeedFile: undefined,
    credsFile: undefined,
    tlsCa: undefined,
    tlsCert: undefined,
    tlsKey: undefined,
    inboxPrefix: undefined,
  };
}

/** What `connect()` takes: servers without userinfo, the authenticator, TLS, the inbox prefix. */
export interface NatsConnectOptions {
  servers: string[];
  authenticator?: Authenticator[];
  tls?: TlsOptions;
  inboxPrefix?: string;
}

/** Settings that cannot work together, or a file that cannot be used. */
export class NatsSettingsError extends Error {
  override readonly name = 'NatsSettingsError';
  readonly code = 'nats_settings';
}

export interface ParsedServer {
  /** `scheme://host:port`, credential-free. */
  server: string;
  user: string | undefined;
  pass: string | undefined;
  tls: boolean;
}

/** `a,b , c` → `['a','b','c']`: a cluster is given as a comma-separated list. */
export function splitServers(list: string): string[] {
  return list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

function parseServer(text: string): ParsedServer {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `nats://${text}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new NatsSettingsError(`invalid NATS server \`${redactUrl(text)}\` (userinfo must be percent-encoded)`);
  }
  const scheme = url.protocol.replace(/:$/, '').toLowerCase();
  if (!['nats', 'tls'].includes(scheme) || !url.host) {
    throw new NatsSettingsError(`invalid NATS server \`${redactUrl(text)}\`: expected nats://host:port or tls://host:port`);
  }
  const decode = (s: string) => (s === '' ? undefined : decodeURIComponent(s));
  return {
    server: `${scheme}://${url.host}`,
    user: decode(url.username),
    pass: decode(url.password),
    tls: scheme === 'tls',
  };
}

/** Userinfo shared by the servers of the list (one set of credentials for the whole cluster). */
function urlCredentials(parsed: ParsedServer[]): { user?: string; pass?: string } {
  const given = parsed.filter((p) => p.user !== undefined || p.pass !== undefined);
  const distinct = new Set(given.map((p) => JSON.stringify([p.user, p.pass])));
  if (distinct.size > 1) throw new NatsSettingsError('the servers of the NATS URL carry different credentials; give one set');
  const first = given[0];
  return first ? { user: first.user, pass: first.pass } : {};
}

// The prefix of a subscription `<prefix>.>`: dot-separated tokens, none empty, no wildcard.
// Gateways answer only on subjects under `_INBOX…` (connection.ts): a reply subject is the
// requester's to choose, and an answer goes out with the gateway's rights.
const INBOX_PREFIX = /^_INBOX[A-Za-z0-9_-]*(\.[^\s.*>]+)*$/;

/**
 * The checks that need no file: one kind of credential at most, a password file only with a user,
 * a TLS certificate only with its key, an inbox prefix that can start a subject. Returns the
 * parsed servers.
 */
export function checkNatsSettings(url: string, auth: Partial<NatsAuthSettings> = {}): ParsedServer[] {
  const list = splitServers(url);
  if (list.length === 0) throw new NatsSettingsError('the NATS URL names no server');
  const parsed = list.map(parseServer);
  const fromUrl = urlCredentials(parsed);
  const kinds = [
    fromUrl.user !== undefined || fromUrl.pass !== undefined ? 'user info in the NATS URL' : undefined,
    auth.user !== undefined || auth.passwordFile !== undefined ? '--nats-user/--nats-password-file' : undefined,
    auth.tokenFile !== undefined ? '--nats-token-file' : undefined,
    auth.nkeySeedFile !== undefined ? '--nats-nkey-seed' : undefined,
    auth.credsFile !== undefined ? '--nats-creds' : undefined,
  ].filter((k): k is string => k !== undefined);
  if (kinds.length > 1) throw new NatsSettingsError(`give one kind of NATS credential, not ${kinds.join(' and ')}`);
  if (auth.passwordFile !== undefined && auth.user === undefined) throw new NatsSettingsError('--nats-password-file needs --nats-user');
  if ((auth.tlsCert === undefined) !== (auth.tlsKey === undefined)) throw new NatsSettingsError('--nats-tls-cert and --nats-tls-key go together');
  if (auth.inboxPrefix !== undefined && !INBOX_PREFIX.test(auth.inboxPrefix)) {
    throw new NatsSettingsError(
      `invalid --nats-inbox-prefix \`${auth.inboxPrefix}\`: expected subject tokens without wildcards or white space, the first starting with _INBOX (gateways answer only inboxes), e.g. _INBOX_gateway`,
    );
  }
  return parsed;
}

/** Reads a credential file now (so a wrong path fails at start), and again on every reconnect. */
function secretFile(path: string, what: string, keepWhitespace = false): () => string {
  const read = () => {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
      // A .creds file's framing needs its line ends; a password or token file's final newline is not part of it.
      if (!keepWhitespace) text = text.trim();
    } catch (err) {
      throw new NatsSettingsError(`cannot read the ${what} file ${path} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    if (text.trim() === '') throw new NatsSettingsError(`the ${what} file ${path} is empty`);
    return text;
  };
  let last = read();
  // A rotation caught mid-write must not cost the reconnect: keep the last good value.
  return () => {
    try {
      last = read();
    } catch {
      /* keep the last good value */
    }
    return last;
  };
}

const encoder = new TextEncoder();

function nkeySeed(path: string): () => Uint8Array {
  const seed = secretFile(path, 'nkey seed');
  try {
    nkeys.fromSeed(encoder.encode(seed()));
  } catch {
    throw new NatsSettingsError(`the nkey seed file ${path} holds no valid nkey seed`);
  }
  return () => encoder.encode(seed());
}

function credsFile(path: string): () => Uint8Array {
  const creds = secretFile(path, 'creds', true);
  try {
    // Parses the JWT and the seed and signs a nonce: a damaged file fails here, not at connect.
    credsAuthenticator(encoder.encode(creds()))('rlgate-check');
  } catch {
    throw new NatsSettingsError(`the creds file ${path} holds no valid user JWT and seed`);
  }
  return () => encoder.encode(creds());
}

function readable(path: string, what: string): string {
  try {
    readFileSync(path);
  } catch (err) {
    throw new NatsSettingsError(`cannot read the ${what} file ${path} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  return path;
}

/** The nats.js options for a server list (comma-separated; userinfo is a credential) and settings. */
export function natsConnectOptions(url: string, auth: Partial<NatsAuthSettings> = {}): NatsConnectOptions {
  const parsed = checkNatsSettings(url, auth);
  const out: NatsConnectOptions = { servers: parsed.map((p) => p.server) };
  const fromUrl = urlCredentials(parsed);

  let authenticator: Authenticator | undefined;
  if (fromUrl.user !== undefined && fromUrl.pass === undefined) {
    // NATS convention: a user name alone in the URL is a token (`nats://TOKEN@host`).
    authenticator = tokenAuthenticator(fromUrl.user);
  } else if (fromUrl.user !== undefined || fromUrl.pass !== undefined) {
    authenticator = usernamePasswordAuthenticator(fromUrl.user ?? '', fromUrl.pass);
  } else if (auth.user !== undefined) {
    const pass = auth.passwordFile === undefined ? undefined : secretFile(auth.passwordFile, 'NATS password');
    authenticator = usernamePasswordAuthenticator(auth.user, pass);
  } else if (auth.tokenFile !== undefined) {
    authenticator = tokenAuthenticator(secretFile(auth.tokenFile, 'NATS token'));
  } else if (auth.nkeySeedFile !== undefined) {
    authenticator = nkeyAuthenticator(nkeySeed(auth.nkeySeedFile));
  } else if (auth.credsFile !== undefined) {
    authenticator = credsAuthenticator(credsFile(auth.credsFile));
  }
  if (authenticator) out.authenticator = [authenticator];

  const wantsTls = parsed.some((p) => p.tls) || auth.tlsCa !== undefined || auth.tlsCert !== undefined;
  if (wantsTls) {
    const tls: TlsOptions = {};
    if (auth.tlsCa !== undefined) tls.caFile = readable(auth.tlsCa, 'TLS CA');
    if (auth.tlsCert !== undefined) tls.certFile = readable(auth.tlsCert, 'TLS certificate');
    if (auth.tlsKey !== undefined) tls.keyFile = readable(auth.tlsKey, 'TLS key');
    out.tls = tls;
  }
  if (auth.inboxPrefix !== undefined) out.inboxPrefix = auth.inboxPrefix;
  return out;
}
