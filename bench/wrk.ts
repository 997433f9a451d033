// Closed-loop load at a fixed connection count with wrk (C, one thread): a Node load generator
// on a 2-core machine would saturate before nginx does. This file runs wrk and reads its report;
// it never decides what a number means.

import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findExecutable } from './children.ts';

export const WRK = findExecutable(['/usr/bin/wrk', '/usr/local/bin/wrk']);

export interface WrkResult {
  requests: number;
  seconds: number;
  requests_per_s: number;
  /** Answers that were not 2xx/3xx: any at all make the run suspect. */
  non_2xx: number;
  /** connect/read/write/timeout errors wrk counted. */
  socket_errors: number;
  latency_ms: { p50: number; p90: number; p99: number };
}

/** A Lua script making every request `POST path` with a JSON `body`. */
export function writePostScript(dir: string, name: string, path: string, body: string): string {
  const file = join(dir, `${name}.lua`);
  // A long bracket string keeps the JSON's quotes as they are.
  writeFileSync(file, `wrk.method = "POST"\nwrk.path = "${path}"\nwrk.body = [==[${body}]==]\nwrk.headers["Content-Type"] = "application/json"\n`);
  return file;
}

export async function runWrk(url: string, script: string, connections: number, seconds: number): Promise<WrkResult> {
  if (!WRK) throw new Error('wrk is not installed (apt-get install wrk)');
  const out = await new Promise<string>((resolve, reject) => {
    execFile(WRK, ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', script, url], { timeout: (seconds + 30) * 1000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`wrk failed: ${err.message} ${stderr}`)) : resolve(stdout),
    );
  });
  return parseWrk(out);
}

/** wrk's duration strings (`812.00us`, `1.20ms`, `2.01s`) in ms. */
function durationMs(text: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(text.trim());
  if (!m) return Number.NaN;
  const v = Number(m[1]);
  return m[2] === 'us' ? v / 1000 : m[2] === 'ms' ? v : m[2] === 's' ? v * 1000 : v * 60_000;
}

export function parseWrk(out: string): WrkResult {
  const total = /(\d+) requests in ([\d.]+)(ms|s|m)/.exec(out);
  if (!total) throw new Error(`unreadable wrk report:\n${out}`);
  const requests = Number(total[1]);
  const seconds = durationMs(`${total[2]}${total[3]}`) / 1000;
  const pct = (p: number) => {
    const m = new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm').exec(out);
    return m ? durationMs(m[1]!) : Number.NaN;
  };
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    requests,
    seconds,
    requests_per_s: Math.round((requests / seconds) * 10) / 10,
    non_2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0),
    socket_errors: sock ? sock.slice(1).reduce((s, v) => s + Number(v), 0) : 0,
    latency_ms: { p50: pct(50), p90: pct(90), p99: pct(99) },
  };
}
