// The open-file limit against the fleet (src/gateway/fd-limit.ts): the limit is read from the
// process's limits file, and a fleet that needs more than 80% of it is warned about once per
// step of growth, naming what to raise. The log lines are read back from a real pino logger.

import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { FdBudget, fdsNeeded, openFileLimit } from '../../src/gateway/fd-limit.ts';

const LIMITS = (soft: string, hard: string) => `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            ${soft}                ${hard}                files
Max locked memory         8388608              8388608              bytes
`;

function limitsFile(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'rlgate-limits-'));
  writeFileSync(join(dir, 'limits'), text);
  return join(dir, 'limits');
}

function capture() {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      done();
    },
  });
  return { log: pino({ level: 'info' }, stream), lines };
}

describe('open-file limit', () => {
  it('reads the soft and hard limits of this process', () => {
    const own = openFileLimit();
    expect(own?.soft).toBeGreaterThan(0);
    expect(own!.hard).toBeGreaterThanOrEqual(own!.soft);
    expect(openFileLimit(limitsFile(LIMITS('1024', '4096')))).toEqual({ soft: 1024, hard: 4096 });
    expect(openFileLimit(limitsFile(LIMITS('unlimited', 'unlimited')))).toEqual({ soft: Infinity, hard: Infinity });
    expect(openFileLimit(join(tmpdir(), 'no-such-limits-file'))).toBeUndefined();
  });

  it('warns when the fleet needs more than 80% of the soft limit, naming ulimit when the hard limit allows more', async () => {
    const { log, lines } = capture();
    const budget = new FdBudget(log, { soft: 1024, hard: 65536 });
    budget.check(500); // 756 of 1024: under 80%
    expect(lines).toEqual([]);
    budget.check(600); // 856 > 819
    await new Promise((r) => setImmediate(r));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 40, engines: 600, fds_needed: fdsNeeded(600), open_file_limit: 1024, hard_limit: 65536 });
    expect(String(lines[0]!.msg)).toContain('ulimit -n 1070');
  });

  it('warns once per step of growth, not on every registration', async () => {
    const { log, lines } = capture();
    const budget = new FdBudget(log, { soft: 1000, hard: 1000 });
    for (let n = 600; n <= 1000; n++) budget.check(n);
    await new Promise((r) => setImmediate(r));
    // 856 needed at 600 engines, then again only at 1.25× that (1070, at 814 engines).
    expect(lines.map((l) => l.engines)).toEqual([600, 814]);
    expect(String(lines[0]!.msg)).toContain('raise the hard limit');
  });

  it('says nothing where the limit cannot be read', async () => {
    const { log, lines } = capture();
    new FdBudget(log, null).check(1_000_000);
    await new Promise((r) => setImmediate(r));
    expect(lines).toEqual([]);
  });
});
