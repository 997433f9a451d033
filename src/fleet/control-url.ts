// Where a worker's RL control routes live. An HTTP worker is its own control
// endpoint; a gRPC or ZMQ worker has one only through its `rl.control_url` label, whose wildcard
// bind host is swapped for the host the gateway already reaches the worker on. Pure: never
// connects, and never checks that the URL is reachable.

import type { Worker } from './worker.ts';
import { baseUrlOf, mergedLabels } from './worker.ts';
import { trimWhiteSpace } from './versions.ts';
import type { ConnectionMode } from '../wire/worker-entry.ts';

export const CONTROL_URL_LABEL = 'rl.control_url';

const WILDCARD_HOSTS = new Set(['', '0.0.0.0', '::', '[::]']);

/** `host:port` → host and port; IPv6 brackets stay on the host; an unbracketed `a::b` has no port. */
function splitHostPort(authority: string): { host: string; port: string | undefined } {
  if (authority.startsWith('[')) {
    const end = authority.indexOf(']');
    if (end !== -1) {
      const rest = authority.slice(end + 1);
      return { host: authority.slice(0, end + 1), port: rest.startsWith(':') ? rest.slice(1) : undefined };
    }
  }
  const colon = authority.lastIndexOf(':');
  if (colon !== -1 && !authority.slice(0, colon).includes(':')) {
    return { host: authority.slice(0, colon), port: authority.slice(colon + 1) };
  }
  return { host: authority, port: undefined };
}

/**
 * The worker URL's host, without port, DP suffix and userinfo (IPv6 brackets kept). SMG cuts at
 * the first `@` of the host part, which yields the userinfo for `grpc://u:p@h:1`; this strips
 * the `@<rank>` suffix first and then the userinfo properly.
 */
export function workerHost(workerUrl: string): string {
  const { baseUrl } = baseUrlOf(workerUrl);
  const sep = baseUrl.indexOf('://');
  const rest = sep === -1 ? baseUrl : baseUrl.slice(sep + 3);
  const end = rest.search(/[/?#]/);
  const authority = end === -1 ? rest : rest.slice(0, end);
  const hostPort = authority.slice(authority.lastIndexOf('@') + 1);
  return splitHostPort(hostPort).host;
}

/**
 * Resolve an advertised `rl.control_url` against the worker URL. Null when the label is
 * absent or blank (no control endpoint). A value without `://` and a value naming a concrete
 * host come back trimmed; a wildcard host (empty, `0.0.0.0`, `::`, `[::]`) is replaced by the
 * worker's host, keeping the advertised scheme, port and path.
 */
export function resolveControlUrl(advertised: string | undefined | null, workerUrl: string): string | null {
  if (advertised === undefined || advertised === null) return null;
  const trimmed = trimWhiteSpace(advertised).replace(/\/+$/, '');
  if (trimmed.length === 0) return null;
  const sep = trimmed.indexOf('://');
  if (sep === -1) return trimmed;
  const scheme = trimmed.slice(0, sep);
  const rest = trimmed.slice(sep + 3);
  const slash = rest.indexOf('/');
  const authority = slash === -1 ? rest : rest.slice(0, slash);
  const path = slash === -1 ? '' : rest.slice(slash + 1);
  const { host, port } = splitHostPort(authority);
  if (!WILDCARD_HOSTS.has(host)) return trimmed;
  const replacement = workerHost(workerUrl);
  // Nothing better to offer than what the engine advertised.
  if (replacement.length === 0) return trimmed;
  let out = `${scheme}://${replacement}`;
  if (port !== undefined) out += `:${port}`;
  if (path.length > 0) out += `/${path}`;
  return out;
}

/**
 * An HTTP worker's control base is its `base_url` (an `rl.control_url` label is ignored);
 * a gRPC or ZMQ worker's is its resolved `rl.control_url` label, else null.
 */
export function controlUrlFor(mode: ConnectionMode, baseUrl: string, labels: Record<string, string>): string | null {
  if (mode === 'http') return baseUrl;
  const label = Object.hasOwn(labels, CONTROL_URL_LABEL) ? labels[CONTROL_URL_LABEL] : undefined;
  return resolveControlUrl(label, baseUrl);
}

/** Worked out once per registry entry: a worker is never changed in place (a change is a new object). */
const byWorker = new WeakMap<Worker, string | null>();

/** A registered worker's control endpoint (controlUrlFor over its merged labels); null when it has none. */
export function workerControlUrl(w: Worker): string | null {
  let url = byWorker.get(w);
  if (url === undefined) byWorker.set(w, (url = controlUrlFor(w.connectionMode, w.baseUrl, mergedLabels(w))));
  return url;
}

/** Why a gRPC or ZMQ worker has no control endpoint, with what to do about it. */
export function noControlEndpoint(w: Pick<Worker, 'id' | 'connectionMode'>): string {
  const fix =
    w.connectionMode === 'zmq'
      ? 'ZMQ engines advertise nothing: set the `rl.control_url` label when registering the worker'
      : 'launch the engine with a routable --rl-control-host (a wildcard bind is not advertised), or set the `rl.control_url` label when registering the worker';
  return `worker \`${w.id}\` uses connection mode \`${w.connectionMode}\` and has no \`rl.control_url\`: ${fix}`;
}
