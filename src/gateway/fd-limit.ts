// The open-file limit against the fleet: every engine holds about one socket (its connection,
// shared by probes, control calls and the data plane), plus the gateway's own listeners, clients
// and NATS. A fleet past the limit fails at random with EMFILE, so the gateway says so before:
// at start-up against the fleet it found, and again whenever the fleet grows past the next mark.

import { readFileSync } from 'node:fs';
import type { Registry } from '../fleet/registry.ts';
import type { Logger } from '../obs/logger.ts';

/** Sockets and files the gateway holds beside its engines' connections. */
const BASE_FDS = 256;
/** Warn when the fleet needs more than this share of the limit. */
const SHARE = 0.8;

/** The soft and hard open-file limits of this process, from /proc (undefined where there is none). */
export function openFileLimit(limits = '/proc/self/limits'): { soft: number; hard: number } | undefined {
  try {
    const line = readFileSync(limits, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const [soft, hard] = (line?.match(/\d+|unlimited/g) ?? []).map((v) => (v === 'unlimited' ? Infinity : Number(v)));
    return soft !== undefined && hard !== undefined ? { soft, hard } : undefined;
  } catch {
    return undefined;
  }
}

/** File descriptors a fleet of `engines` engines needs on this gateway, about. */
export function fdsNeeded(engines: number): number {
  return BASE_FDS + engines;
}

/** Watches the fleet's size against the limit; warns once per step past it. */
export class FdBudget {
  private warnedAt = 0;

  constructor(
    private readonly log: Logger,
    /** null where the limit cannot be read: then nothing is said. */
    private readonly limit: { soft: number; hard: number } | null = openFileLimit() ?? null,
  ) {}

  /** Checks the fleet found now, and again as it grows. */
  watch(registry: Registry): void {
    this.check(registry.size);
    registry.on('added', () => this.check(registry.size));
  }

  /** The fleet has `engines` engines now. */
  check(engines: number): void {
    if (!this.limit) return;
    const need = fdsNeeded(engines);
    if (need <= this.limit.soft * SHARE || need < this.warnedAt * 1.25) return;
    this.warnedAt = need;
    const raise =
      this.limit.soft < this.limit.hard
        ? `raise the soft limit (ulimit -n ${Math.min(this.limit.hard, Math.ceil(need / SHARE))}; LimitNOFILE= for systemd, ulimits.nofile in compose)`
        : `raise the hard limit (LimitNOFILE= for systemd, ulimits.nofile in compose, /etc/security/limits.conf), then ulimit -n`;
    this.log.warn(
      { engines, fds_needed: need, open_file_limit: this.limit.soft, hard_limit: this.limit.hard },
      `the open-file limit (${this.limit.soft}) is too low for ${engines} engines (about ${need} descriptors: one connection per engine): ${raise}`,
    );
  }
}
