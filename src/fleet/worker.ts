// The registry's unit: one registered engine endpoint (one DP rank of an engine when DP-aware).
// Owns the Worker type (the shared registry's entry with its owner) and the pure facts derived
// from its URL; never does I/O.

import type { ConnectionMode, HttpPoolConfig, StoredWorker } from '../wire/worker-entry.ts';

/** The placeholder model of workers whose model is not known; never a real model. */
export const UNKNOWN_MODEL_ID = 'unknown';

/** What a caller may send to `POST /workers`. */
export interface WorkerRegistration {
  url: string;
  api_key?: string;
  runtime_type?: string;
  worker_type?: string;
  labels?: Record<string, string>;
  bootstrap_port?: number;
  http_pool?: HttpPoolConfig;
}

export type WorkerHealth = 'pending' | 'ready' | 'not_ready';

/** A registered worker: the shared registry's entry (wire/worker-entry.ts) and who owns its actor. */
export interface Worker extends Omit<StoredWorker, 'writer'> {
  /** Id of the gateway replica whose actor owns this worker. */
  owner: string;
}

/** Merged label view: discovered metadata overridden by caller labels. */
export function mergedLabels(w: Pick<Worker, 'discoveredLabels' | 'callerLabels'>): Record<string, string> {
  return { ...w.discoveredLabels, ...w.callerLabels };
}

const DP_SUFFIX = /@(\d+)$/;

/** `http://a:1@3` → `http://a:1`; `http://u:p@h:1` and `http://a:1@` stay as they are. */
export function baseUrlOf(url: string): { baseUrl: string; dpRank: number | null } {
  const m = DP_SUFFIX.exec(url);
  if (!m) return { baseUrl: url, dpRank: null };
  return { baseUrl: url.slice(0, m.index), dpRank: Number(m[1]) };
}

/** Connection mode from the URL scheme; null for a scheme the gateway cannot reach. */
export function connectionModeOf(url: string): ConnectionMode | null {
  const scheme = url.slice(0, Math.max(0, url.indexOf('://'))).toLowerCase();
  if (scheme === 'http' || scheme === 'https') return 'http';
  if (scheme === 'grpc' || scheme === 'grpcs') return 'grpc';
  if (scheme === 'ipc' || scheme === 'tcp') return 'zmq';
  return null;
}
