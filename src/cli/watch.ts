// `rlgate watch`: the operator's view of the fleet — first every engine as the shared `engines`
// bucket holds it, then every engine actor transition as it is published on `rl.engine.*.state`,
// one line each (`--json` for raw events), and a line when the NATS connection drops or comes
// back. Exits 0 on SIGINT/SIGTERM, connected or not.

import { natsClientFlagsHelp, readNatsClientFlags } from '../bus/client-flags.ts';
import { natsConnectOptions } from '../bus/connect-options.ts';
import { connectBus, type Bus } from '../bus/connection.ts';
import { bucketName } from '../bus/buckets.ts';
import { decode } from '../bus/codec.ts';
import { Kvm } from '@nats-io/kv';
import { subjects } from '../bus/subjects.ts';
import { waitForStop } from './stop-signals.ts';
import type { EngineStateEvent } from '../fleet/engine-host.ts';
import { redactUrl } from '../obs/redact-url.ts';

// A watcher has nothing to drain worth waiting for.
const WATCH_CLOSE_MS = 1_000;

export async function watchCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help')) {
    process.stdout.write(`usage: rlgate watch [--nats-url U] [--subject-root R] [--json] [NATS credential flags]\n  env: RLGATE_NATS_URL (then NATS_URL), RLGATE_SUBJECT_ROOT\n${natsClientFlagsHelp()}\n`);
    return 0;
  }
  const nats = readNatsClientFlags(argv);
  const root = flag(argv, '--subject-root') ?? process.env.RLGATE_SUBJECT_ROOT ?? 'rl';
  const json = argv.includes('--json');
  const bus = await connectBus({ ...natsConnectOptions(nats.url, nats.auth), name: 'rlgate-watch' });
  const subj = subjects(root);
  bus.subscribe(subj.allEngineStates(), (data) => {
    const e = data as EngineStateEvent;
    process.stdout.write(json ? `${JSON.stringify(e)}\n` : `${formatEvent(e)}\n`);
  });
  await printSnapshot(bus, root, json);
  process.stderr.write(`watching ${subj.allEngineStates()} on ${redactUrl(nats.url)} (Ctrl-C to stop)\n`);
  // Silence is not "nothing happens": say when the bus is gone and when it is back (nats.js keeps
  // reconnecting and re-subscribes by itself).
  bus.onStatus((s) => {
    if (s.event === 'close') return;
    const status = s.event === 'disconnect' ? 'disconnected' : 'reconnected';
    if (json) process.stdout.write(`${JSON.stringify({ bus: status, server: s.server ?? null, time: new Date().toISOString() })}\n`);
    else process.stderr.write(s.event === 'disconnect' ? `NATS disconnected (${s.server ?? '?'}); reconnecting…\n` : `NATS reconnected (${s.server ?? '?'})\n`);
  });
  await waitForStop();
  await bus.close({ timeoutMs: WATCH_CLOSE_MS });
  return 0;
}

/**
 * The fleet as it stands: each engine's last record in the shared `engines` bucket (read-only; a
 * fleet without a gateway yet has no bucket, and nothing is printed).
 */
async function printSnapshot(bus: Bus, root: string, json: boolean): Promise<void> {
  try {
    const kv = await new Kvm(bus.nc).open(bucketName(root, 'engines'), { bindOnly: true });
    for await (const key of await kv.keys()) {
      const entry = await kv.get(key);
      if (!entry || entry.operation !== 'PUT' || entry.length === 0) continue;
      const e = decode(entry.value) as EngineStateEvent & { owner?: string };
      process.stdout.write(json ? `${JSON.stringify({ ...e, snapshot: true })}\n` : `${formatEvent(e)}\n`);
    }
  } catch (err) {
    process.stderr.write(`no fleet snapshot (${(err as Error).message}); following transitions only\n`);
  }
}

export function formatEvent(e: EngineStateEvent & { owner?: string }): string {
  const time = e.time.slice(11, 23);
  const version = e.weight_version ?? '-';
  const extra = e.error ? `  (${e.error})` : '';
  const quarantine = e.quarantine ? ` quarantine=${e.quarantine}` : '';
  const owner = e.owner ? ` owner=${e.owner}` : '';
  return `${time}  ${e.url.padEnd(28)} ${e.state.padEnd(12)} control=${e.control.padEnd(6)} version=${version.padEnd(10)} breaker=${e.breaker} in_flight=${e.in_flight}${quarantine}${owner}${extra}`;
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.findIndex((a) => a === name || a.startsWith(`${name}=`));
  if (i < 0) return undefined;
  const a = argv[i]!;
  return a.includes('=') ? a.slice(a.indexOf('=') + 1) : argv[i + 1];
}
