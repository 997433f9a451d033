// A fleet of N SGLang simulators in ONE process, so a benchmark's engines never share an event
// loop with the gateway or the client (children.ts runs several for a fleet larger than one
// process holds: each engine costs a listening socket and its accepted connections). It also
// times, engine-side, every request tagged `?bench=<tag>` (headers parsed → last byte handed to
// the socket) through node:http's diagnostics channels, without touching the simulator. A refit's
// calls carry no query but the gateway's `x-request-id: refit-<id>` header: they are tagged
// `refit-<id> <path>`, one tag per phase. It never talks to the gateway.
//
//   node --import tsx bench/sim-fleet.ts --count N [--token-rate R]
//   stdout: {"event":"listening","urls":[...],"pid":...}   (one line, when all N listen)
//   stdin:  {"cmd":"stats"} → {"event":"stats","tags":{...}} (and forgets them); {"cmd":"stop"}
// It stops on {"cmd":"stop"}, stdin EOF (the parent went away), SIGTERM or SIGINT.

import { subscribe } from 'node:diagnostics_channel';
import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { createInterface } from 'node:readline';
import { startSglangSim, type SglangSim } from '../sim/sglang/server.ts';

// Per process: 2,500 listeners and their accepted connections stay well inside a 20,000-fd limit.
const MAX_FLEET = 2500;
// Simulators started at once: start-up is mostly waiting on listen(), so a few in flight are
// faster than one after another, and more would only queue.
const START_CONCURRENCY = 32;

/** What the fleet saw of one tag: the N legs of one fan-out iteration, or of one refit phase. */
export interface TagStats {
  /** Requests carrying the tag (one per engine when every leg arrived). */
  n: number;
  /** The slowest leg's engine-side service time, ms. */
  max_service_ms: number;
  /** First leg's arrival to the last leg's answer, on the fleet's clock, ms. */
  span_ms: number;
  /** First arrival and last answer, wall clock (epoch ms, µs precision): spans of several fleet processes merge. */
  first_ms: number;
  last_ms: number;
}

interface Acc {
  n: number;
  maxService: number;
  first: number;
  last: number;
}

/** Engine-side timing of tagged requests, for every node:http server in this process. */
class ServiceClock {
  private readonly started = new WeakMap<ServerResponse, { tag: string; t0: number }>();
  private tags = new Map<string, Acc>();

  listen(): void {
    subscribe('http.server.request.start', (msg) => {
      const { request, response } = msg as { request: { url?: string; headers?: Record<string, string | string[] | undefined> }; response: ServerResponse };
      const tag = benchTag(request.url ?? '') ?? refitTag(request.url ?? '', request.headers?.['x-request-id']);
      if (tag !== null) this.started.set(response, { tag, t0: performance.now() });
    });
    subscribe('http.server.response.finish', (msg) => {
      const { response } = msg as { response: ServerResponse };
      const s = this.started.get(response);
      if (!s) return;
      const t1 = performance.now();
      this.started.delete(response);
      const a = this.tags.get(s.tag);
      if (!a) {
        this.tags.set(s.tag, { n: 1, maxService: t1 - s.t0, first: s.t0, last: t1 });
        return;
      }
      a.n++;
      a.maxService = Math.max(a.maxService, t1 - s.t0);
      a.first = Math.min(a.first, s.t0);
      a.last = Math.max(a.last, t1);
    });
  }

  /** Everything seen since the last call, then forgotten (the fleet's memory stays bounded). */
  drain(): Record<string, TagStats> {
    const out: Record<string, TagStats> = {};
    const origin = performance.timeOrigin;
    for (const [tag, a] of this.tags)
      out[tag] = {
        n: a.n,
        max_service_ms: round(a.maxService),
        span_ms: round(a.last - a.first),
        first_ms: round(origin + a.first),
        last_ms: round(origin + a.last),
      };
    this.tags = new Map();
    return out;
  }
}

function benchTag(url: string): string | null {
  const i = url.indexOf('bench=');
  if (i < 0 || (url[i - 1] !== '?' && url[i - 1] !== '&')) return null;
  const end = url.indexOf('&', i);
  return url.slice(i + 6, end < 0 ? undefined : end);
}

/** `refit-<id> <path>` for a refit's call (the gateway's request id), else null. */
function refitTag(url: string, requestId: string | string[] | undefined): string | null {
  if (typeof requestId !== 'string' || !requestId.startsWith('refit-')) return null;
  const q = url.indexOf('?');
  return `${requestId} ${q < 0 ? url : url.slice(0, q)}`;
}

function round(v: number): number {
  return Math.round(v * 1000) / 1000;
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : argv.find((a) => a.startsWith(`${name}=`))?.slice(name.length + 1);
}

function parseCount(argv: string[]): number {
  const raw = flag(argv, '--count');
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > MAX_FLEET) throw new Error(`--count must be an integer 1..${MAX_FLEET}, got ${raw}`);
  return n;
}

/** Tokens/s per request (the simulator's --token-rate); 0 = as fast as possible. Absent: its default. */
function parseTokenRate(argv: string[]): number | undefined {
  const raw = flag(argv, '--token-rate');
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--token-rate must be a number >= 0, got ${raw}`);
  return n === 0 ? Infinity : n;
}

/** This process's open-file limit (soft), for the message of a failed start; null where there is none. */
function fdLimit(): number | null {
  try {
    const row = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = row?.slice('Max open files'.length).trim().split(/\s+/)[0];
    return soft === undefined || soft === 'unlimited' ? null : Number(soft);
  } catch {
    return null;
  }
}

function emit(line: unknown): void {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

async function main(): Promise<void> {
  const count = parseCount(process.argv.slice(2));
  const tokenRate = parseTokenRate(process.argv.slice(2));
  const clock = new ServiceClock();
  clock.listen();
  const sims: SglangSim[] = [];
  let stopping: Promise<void> | undefined;
  const stop = (code: number) => {
    stopping ??= Promise.allSettled(sims.map((s) => s.close())).then(() => process.exit(code));
    return stopping;
  };
  process.once('SIGTERM', () => void stop(0));
  process.once('SIGINT', () => void stop(0));

  try {
    // Recording off: the request log is for tests and would only cost the benchmark memory.
    let next = 0;
    const worker = async () => {
      while (next < count && !stopping) {
        next++;
        sims.push(await startSglangSim({ host: '127.0.0.1', port: 0, recordLimit: 0, ...(tokenRate !== undefined ? { tokenRate } : {}) }));
      }
    };
    await Promise.all(Array.from({ length: Math.min(START_CONCURRENCY, count) }, worker));
    if (stopping) return;
  } catch (err) {
    process.stderr.write(`sim-fleet: ${(err as Error).message} (${sims.length} of ${count} simulators were listening; open-file limit ${fdLimit()})\n`);
    await stop(1);
    return;
  }
  emit({ event: 'listening', urls: sims.map((s) => s.url), pid: process.pid });

  const lines = createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    let cmd: unknown;
    try {
      cmd = (JSON.parse(line) as { cmd?: unknown }).cmd;
    } catch {
      cmd = undefined;
    }
    if (cmd === 'stats') emit({ event: 'stats', tags: clock.drain() });
    else if (cmd === 'stop') void stop(0);
    else emit({ event: 'error', message: `unknown command line: ${line.slice(0, 200)}` });
  });
  lines.on('close', () => void stop(0));
}

main().catch((err: unknown) => {
  process.stderr.write(`sim-fleet: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exit(1);
});
