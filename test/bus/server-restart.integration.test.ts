// The embedded nats-server's supervision: a server that dies without stop() is started again on
// the same port and store (a client reconnects to the same URL and finds its KV data), each step
// is reported through onEvent, a restart that fails is retried, and stop() ends it all.

import { Kvm } from '@nats-io/kv';
import { afterEach, describe, expect, it } from 'vitest';
import { connectBus, type Bus } from '../../src/bus/connection.ts';
import { startEmbeddedNats, type EmbeddedNats, type NatsServerEvent } from '../../src/bus/server.ts';
import { until } from '../fixtures/gateway-process.ts';
import { alive } from '../fixtures/pids.ts';
import { squatPort, type PortSquatter } from '../fixtures/port-squatter.ts';

let cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

describe('a supervised embedded nats-server', () => {
  it('comes back on the same port and store after SIGKILL, with its KV data, and the client reconnects', async () => {
    const events: NatsServerEvent[] = [];
    const nats = await startEmbeddedNats({ onEvent: (e) => events.push(e) });
    cleanups.push(() => nats.stop());
    const client: Bus = await connectBus({ url: nats.url, name: 'client' });
    cleanups.push(() => client.close({ timeoutMs: 500 }));
    const kv = await new Kvm(client.nc).create(`supervision_${process.pid}`);
    await kv.put('version', '41');

    const firstPid = nats.pid;
    process.kill(firstPid, 'SIGKILL');
    await until('the restart', 15_000, async () => events.some((e) => e.type === 'restarted'));
    expect(events[0]).toMatchObject({ type: 'exited', pid: firstPid, signal: 'SIGKILL' });
    expect(events[1]).toMatchObject({ type: 'restarted' });
    expect(nats.pid).not.toBe(firstPid);
    expect(alive(nats.pid)).toBe(true);
    expect(nats.url).toBe(`nats://127.0.0.1:${nats.port}`);

    await until('the client to reconnect', 15_000, async () => client.connected);
    expect((await kv.get('version'))?.string()).toBe('41');
  }, 30_000);

  it('retries a restart that fails (its port taken) until the port is free', async () => {
    const events: NatsServerEvent[] = [];
    let squatter: PortSquatter | undefined;
    let port = 0;
    // Take the port the moment the death is reported: the restart waits 200 ms before it tries.
    const nats = await startEmbeddedNats({
      onEvent: (e) => {
        events.push(e);
        if (e.type === 'exited') squatter = squatPort(port);
      },
    });
    port = nats.port;
    cleanups.push(() => nats.stop());
    cleanups.push(() => squatter?.release());
    process.kill(nats.pid, 'SIGKILL');
    await until('a failed restart', 15_000, async () => events.some((e) => e.type === 'restart_failed'));
    await squatter!.held;
    const failed = events.find((e) => e.type === 'restart_failed') as Extract<NatsServerEvent, { type: 'restart_failed' }>;
    expect(failed.error.message).toMatch(/address already in use/);
    expect(failed.retryInMs).toBeGreaterThan(0);

    await squatter!.release();
    await until('the restart', 20_000, async () => events.some((e) => e.type === 'restarted'));
    expect(alive(nats.pid)).toBe(true);
    expect(nats.port).toBe(port);
  }, 40_000);

  it('stop() ends the supervision, even while a restart is pending', async () => {
    const events: NatsServerEvent[] = [];
    const nats = await startEmbeddedNats({ onEvent: (e) => events.push(e) });
    const pid = nats.pid;
    process.kill(pid, 'SIGKILL');
    await until('the exit to be reported', 5_000, async () => events.length > 0);
    await nats.stop();
    // A restart that was due must not happen now: give it well past its backoff.
    await new Promise((r) => setTimeout(r, 1_000));
    expect(events.map((e) => e.type)).toEqual(['exited']);
    expect(nats.pid).toBe(pid);
    expect(alive(pid)).toBe(false);
  }, 20_000);

  it('does not restart with restart: false', async () => {
    const events: NatsServerEvent[] = [];
    const nats = await startEmbeddedNats({ restart: false, onEvent: (e) => events.push(e) });
    cleanups.push(() => nats.stop());
    const pid = nats.pid;
    process.kill(pid, 'SIGKILL');
    await until('the server to die', 5_000, async () => !alive(pid));
    await new Promise((r) => setTimeout(r, 1_000));
    expect(events).toEqual([]);
    expect(nats.pid).toBe(pid);
  }, 20_000);
});
