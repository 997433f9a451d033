// `rlgate watch`: the operator's view of the fleet — first every engine as the shared `engines`
// bucket holds it, then every engine actor transition (`<root>.engine.*.state`) and every refit
// event (`<root>.refit.*.events`). On a terminal: a table redrawn in place, one row per engine with
// the refit and step touching it. Otherwise: one line per transition, naming that refit and step.
// `--json`: the records and events themselves, one per line, each with its `kind`. Says when the
// NATS connection drops or comes back. Exits 0 on SIGINT/SIGTERM, connected or not.

import { parseArgs } from 'node:util';
import { Kvm, type KV } from '@nats-io/kv';
import type { QueuedIterator } from '@nats-io/transport-node';
import { natsClientFlagsHelp, natsClientParseOptions, readNatsClientFlags } from '../bus/client-flags.ts';
import { natsConnectOptions } from '../bus/connect-options.ts';
import { connectBus, type Bus } from '../bus/connection.ts';
import { bucketName } from '../bus/buckets.ts';
import { decode } from '../bus/codec.ts';
import { subjects } from '../bus/subjects.ts';
import { redactUrl } from '../obs/redact-url.ts';
import { FleetWatch, tableLines, transitionLine, type EngineRow } from './fleet-table.ts';
import { waitForStop } from './stop-signals.ts';
import { isTerminal, LiveRegion } from './terminal.ts';

// A watcher has nothing to drain worth waiting for.
const WATCH_CLOSE_MS = 1_000;

const HELP = `usage: rlgate watch [--nats-url U] [--subject-root R] [--json] [NATS credential flags]
  On a terminal: a table of the fleet redrawn in place, one row per engine (url, state, control,
  weight version, breaker, in-flight, owner replica, and the refit and step touching it).
  Otherwise: one line per engine, then one per transition, with refit=<id> step=<step> while a
  refit touches that engine.
  --json  one JSON object per line: {"kind":"engine","snapshot":true,...} for every engine record
          first, then {"kind":"engine",...} per state event, {"kind":"refit",...} per refit event
          (docs/refit-events.md), {"kind":"bus","bus":"disconnected"|"reconnected",...}
  env: RLGATE_NATS_URL (then NATS_URL), RLGATE_SUBJECT_ROOT
${natsClientFlagsHelp()}`;

export async function watchCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${HELP}\n`);
    return 0;
  }
  try {
    // Only known flags: a mistyped one would otherwise be ignored and watch the wrong fleet.
    parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        'subject-root': { type: 'string' },
        json: { type: 'boolean' },
        ...natsClientParseOptions(),
      },
    });
  } catch (err) {
    process.stderr.write(`${redactUrl((err as Error).message)}\n${HELP}\n`);
    return 2;
  }
  const nats = readNatsClientFlags(argv);
  const root = flag(argv, '--subject-root') ?? process.env.RLGATE_SUBJECT_ROOT ?? 'rl';
  const json = argv.includes('--json');
  const table = !json && isTerminal(process.stdout);
  const bus = await connectBus({ ...natsConnectOptions(nats.url, nats.auth), name: 'rlgate-watch' });
  const subj = subjects(root);
  const fleet = new FleetWatch();
  const out = (line: string) => void process.stdout.write(`${line}\n`);
  let region: LiveRegion | undefined;
  let busState = 'connected';
  let lastChange = new Date().toISOString();
  const changed = () => {
    lastChange = new Date().toISOString();
    region?.refresh();
  };

  // Callbacks, not iterators: they run in the order the messages arrive, so a refit's phase event
  // is applied before the engine transitions it causes.
  bus.nc.subscribe(subj.allEngineStates(), {
    callback: (err, msg) => {
      if (err) return;
      const e = decodeOrNull(msg.data) as EngineRow | null;
      if (!e || typeof e.id !== 'string') return;
      const before = fleet.engines.get(e.id);
      fleet.engine(e);
      if (json) out(JSON.stringify({ kind: 'engine', ...e }));
      else if (!table) out(transitionLine({ ...e, owner: e.owner ?? before?.owner }, fleet.touch(e.id)));
      changed();
    },
  });
  bus.nc.subscribe(subj.allRefitEvents(), {
    callback: (err, msg) => {
      if (err) return;
      const e = decodeOrNull(msg.data);
      if (e === null || typeof e !== 'object') return;
      // A rolling refit's copy of its wave's event: the wave's own stream brings the event itself.
      if (typeof (e as { wave_refit_id?: unknown }).wave_refit_id === 'string' && (e as { type?: unknown }).type !== 'wave') return;
      if (fleet.refitEvent(e)) changed();
      if (json) out(JSON.stringify({ kind: 'refit', ...e }));
    },
  });

  const kv = await openEngines(bus, root);
  for (const e of kv ? await readSnapshot(kv) : []) {
    fleet.engine(e);
    if (json) out(JSON.stringify({ kind: 'engine', ...e, snapshot: true }));
    else if (!table) out(transitionLine(e, fleet.touch(e.id)));
  }
  // The table also follows the records: they alone name a new owner, and say when an engine leaves.
  const records = table && kv ? await kv.watch({ include: 'updates' }) : undefined;
  if (records) void followRecords(records, fleet, changed);

  process.stderr.write(`watching ${subj.allEngineStates()} and ${subj.allRefitEvents()} on ${redactUrl(nats.url)} (Ctrl-C to stop)\n`);
  if (table) {
    const where = redactUrl(nats.url);
    region = new LiveRegion(
      process.stdout,
      (size) => {
        const running = [...fleet.refits.values()].filter((p) => p.status === 'running').length;
        const header =
          `rlgate watch · ${where} · ${fleet.engines.size} engine${fleet.engines.size === 1 ? '' : 's'} · ` +
          `${running} refit${running === 1 ? '' : 's'} running · NATS ${busState} · last change ${lastChange.slice(11, 19)}`;
        return tableLines(fleet, size, header);
      },
      { boldFirstLine: true },
    );
    region.flush();
  }
  // Silence is not "nothing happens": say when the bus is gone and when it is back (nats.js keeps
  // reconnecting and re-subscribes by itself).
  bus.onStatus((s) => {
    if (s.event === 'close') return;
    const status = s.event === 'disconnect' ? 'disconnected' : 'reconnected';
    const text = s.event === 'disconnect' ? `NATS disconnected (${s.server ?? '?'}); reconnecting…` : `NATS reconnected (${s.server ?? '?'})`;
    if (json) out(JSON.stringify({ kind: 'bus', bus: status, server: s.server ?? null, time: new Date().toISOString() }));
    else if (region) {
      busState = status === 'reconnected' ? 'connected' : status;
      region.print(`${new Date().toISOString().slice(11, 23)}  ${text}`);
      changed();
    } else process.stderr.write(`${text}\n`);
  });
  await waitForStop();
  region?.close();
  records?.stop();
  await bus.close({ timeoutMs: WATCH_CLOSE_MS });
  return 0;
}

function decodeOrNull(data: Uint8Array): unknown {
  try {
    return decode(data);
  } catch {
    return null; // not ours to judge: a watcher shows what it can read
  }
}

/** The shared `engines` bucket, read-only; null when the fleet has no gateway yet (no bucket). */
async function openEngines(bus: Bus, root: string): Promise<KV | null> {
  try {
    return await new Kvm(bus.nc).open(bucketName(root, 'engines'), { bindOnly: true });
  } catch (err) {
    process.stderr.write(`no fleet snapshot (${(err as Error).message}); following transitions only\n`);
    return null;
  }
}

/** The fleet as it stands: each engine's last record in the bucket. */
async function readSnapshot(kv: KV): Promise<EngineRow[]> {
  const rows: EngineRow[] = [];
  try {
    for await (const key of await kv.keys()) {
      const entry = await kv.get(key);
      if (!entry || entry.operation !== 'PUT' || entry.length === 0) continue;
      rows.push(decode(entry.value) as EngineRow);
    }
  } catch (err) {
    process.stderr.write(`fleet snapshot cut short (${(err as Error).message}); following transitions only\n`);
  }
  return rows;
}

async function followRecords(
  records: QueuedIterator<{ operation: string; key: string; length: number; value: Uint8Array }>,
  fleet: FleetWatch,
  changed: () => void,
): Promise<void> {
  try {
    for await (const entry of records) {
      if (entry.operation === 'PUT' && entry.length > 0) {
        const e = decodeOrNull(entry.value) as EngineRow | null;
        if (e && typeof e.id === 'string') fleet.engine(e);
      } else fleet.remove(entry.key);
      changed();
    }
  } catch {
    // The watch ends with the connection; the state events still come.
  }
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.findIndex((a) => a === name || a.startsWith(`${name}=`));
  if (i < 0) return undefined;
  const a = argv[i]!;
  return a.includes('=') ? a.slice(a.indexOf('=') + 1) : argv[i + 1];
}
