// The gateway's shutdown: its clean-up steps run last-pushed first, a step that throws or never
// ends is logged and the steps after it still run; and the --shutdown-timeout-secs setting. The
// deadlines run on vitest's fake clock, stepped by the test.

import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ConfigError, defaultConfig, loadConfig } from '../../src/gateway/config.ts';
import { runCleanups, type CleanupStep } from '../../src/gateway/shutdown.ts';

function captureLog() {
  const lines: Array<{ msg: string; level: number; [k: string]: unknown }> = [];
  const log = pino({ level: 'debug' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { log, lines };
}

describe('runCleanups', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('runs the steps last-pushed first and empties the list', async () => {
    const ran: string[] = [];
    const steps: CleanupStep[] = [() => void ran.push('http server'), async () => void ran.push('bus'), () => void ran.push('nats')];
    const { log } = captureLog();
    await runCleanups(steps, { timeoutMs: 5_000, log });
    expect(ran).toEqual(['nats', 'bus', 'http server']);
    expect(steps).toEqual([]);
  });

  it('logs a step that throws and goes on', async () => {
    const ran: string[] = [];
    const { log, lines } = captureLog();
    await runCleanups(
      [
        () => void ran.push('first pushed'),
        () => {
          throw new Error('drain failed');
        },
      ],
      { timeoutMs: 5_000, log },
    );
    expect(ran).toEqual(['first pushed']);
    expect(lines.find((l) => l.msg === 'error during shutdown')).toMatchObject({ err: { message: 'drain failed' } });
  });

  it('leaves a step that never ends once the deadline has passed, and still runs the ones after it', async () => {
    const ran: string[] = [];
    const { log, lines } = captureLog();
    const hung = () => new Promise<void>(() => {}); // e.g. a drain waiting on a dead NATS server
    const done = runCleanups([() => void ran.push('stop the embedded server'), hung], { timeoutMs: 200, log });
    // Past the 200 ms deadline the hung step still has the 1 s floor every step gets.
    await vi.advanceTimersByTimeAsync(999);
    expect(ran).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    await done;
    expect(ran).toEqual(['stop the embedded server']);
    const warning = lines.find((l) => l.msg.startsWith('a shutdown step did not finish in time'));
    expect(warning).toMatchObject({ level: 40 });
    expect(warning?.step).toBe('hung'); // a named step by its name, an anonymous one by its source
  });
});

describe('--shutdown-timeout-secs', () => {
  it('defaults to 30 s and is read from a flag, the environment and a config file key', () => {
    expect(defaultConfig().shutdownTimeoutSecs).toBe(30);
    expect(loadConfig(['--shutdown-timeout-secs', '5'], {}).shutdownTimeoutSecs).toBe(5);
    expect(loadConfig([], { RLGATE_SHUTDOWN_TIMEOUT_SECS: '7' }).shutdownTimeoutSecs).toBe(7);
  });

  it('refuses 0 and values a Node timer cannot hold', () => {
    expect(() => loadConfig(['--shutdown-timeout-secs', '0'], {})).toThrow(ConfigError);
    expect(() => loadConfig(['--shutdown-timeout-secs', '99999999'], {})).toThrow(/shutdown_timeout_secs must be 1\.\./);
  });
});
