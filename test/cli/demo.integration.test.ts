// `rlgate demo` as a user runs it: a child process that must exit 0, print its refit reports
// (the second naming the engine it killed, the third rolling over the two left) and the version
// after each, and leave no process.

import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';

function run(args: string[]): Promise<{ code: number | null; out: string; err: string; pid: number }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/rlgate.mjs', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('exit', (code) => resolve({ code, out, err, pid: child.pid! }));
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('rlgate demo', () => {
  it('exits 0 after both refits and prints both reports', { timeout: 120_000 }, async () => {
    const { code, out, err } = await run(['demo']);
    expect(code, err).toBe(0);
    expect(out).toMatch(/refit to version "1": HTTP 200, succeeded, 3\/3 engines/);
    expect(out).toMatch(/next \/generate: meta_info\.weight_version = "1"/);
    expect(out).toMatch(/refit to version "2": HTTP 207, partial, 2\/3 engines/);
    expect(out).toMatch(/failed .*upstream_unreachable in pause/);
    expect(out).toMatch(/next \/generate: meta_info\.weight_version = "2"/);
    // The rolling refit: the two live engines, one wave each, then version 3 served.
    expect(out).toMatch(/rolling refit to version "3", one engine at a time: HTTP 20[07]/);
    expect([...out.matchAll(/^ {2}wave \d: 1 engine, succeeded/gm)]).toHaveLength(2);
    expect(out).toMatch(/next \/generate: meta_info\.weight_version = "3"/);
    // Every engine and the nats-server it started are gone: their pids were printed.
    const pids = [...out.matchAll(/\(pid (\d+)\)/g)].map((m) => Number(m[1]));
    expect(pids).toHaveLength(3);
    for (const pid of pids) expect(alive(pid)).toBe(false);
  });
});
