// `rlgate demo`: the whole path on one laptop — an embedded nats-server, three simulated SGLang
// engines in child processes, the gateway, a refit to version 1, one engine killed, a refit to
// version 2 (a 207 naming the dead engine), a rolling refit to version 3 (one engine at a time,
// the others serving), and the weight_version of the next /generate after each. Exits 0 and
// leaves no process behind.

import { request } from 'undici';
import { loadConfig } from '../gateway/config.ts';
import { startGateway, type Gateway } from '../gateway/gateway.ts';
import { createLogger } from '../obs/logger.ts';
import { launchSim, type SimProcess } from '../../sim/launcher.ts';

const ENGINES = 3;

export async function demoCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help')) {
    process.stdout.write('usage: rlgate demo [--verbose]\n  Runs the end-to-end demo and exits 0 when every step behaved as expected.\n');
    return 0;
  }
  const unknown = argv.find((a) => a !== '--verbose');
  if (unknown !== undefined) {
    process.stderr.write(`unknown flag ${unknown}\nusage: rlgate demo [--verbose]\n`);
    return 2;
  }
  const verbose = argv.includes('--verbose');
  const sims: SimProcess[] = [];
  let gw: Gateway | undefined;
  const say = (line = '') => process.stdout.write(`${line}\n`);
  const started = Date.now();
  const cleanup = async () => {
    await gw?.close();
    await Promise.all(sims.map((s) => s.stop()));
  };
  const onSignal = () => void cleanup().then(() => process.exit(130));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    say(`rlgate demo: ${ENGINES} simulated SGLang engines, an embedded nats-server and the gateway`);
    for (let i = 0; i < ENGINES; i++) {
      sims.push(await launchSim('sglang', ['--model', 'demo-model', '--tp-size', '1', '--token-rate', '0']));
    }
    for (const s of sims) say(`  engine ${s.url} (pid ${s.pid})`);

    const config = loadConfig(
      ['--port', '0', '--enable-rl', '--rl-control-timeout-secs', '10', '--health-check-interval-secs', '1', '--worker-urls', ...sims.map((s) => s.url)],
      {},
    );
    gw = await startGateway(config, { log: createLogger({ level: verbose ? 'info' : 'warn' }) });
    say(`  gateway ${gw.url}, NATS ${gw.natsUrl}`);
    await waitReady(gw.url, ENGINES);
    say(`  ${ENGINES} workers registered and ready`);
    say();

    const first = await refit(gw.url, '1');
    printReport('refit to version "1"', first);
    const v1 = await generateVersion(gw.url);
    say(`  next /generate: meta_info.weight_version = ${JSON.stringify(v1)}`);
    say();

    const victim = sims[1]!;
    await victim.kill();
    say(`killed engine ${victim.url} (SIGKILL)`);
    say();

    const second = await refit(gw.url, '2');
    printReport('refit to version "2"', second);
    const v2 = await generateVersion(gw.url);
    say(`  next /generate: meta_info.weight_version = ${JSON.stringify(v2)}`);
    say();

    // Generation need not stop: one engine at a time is drained and refit while the rest serve.
    const third = await refit(gw.url, '3', { kind: 'rolling', max_unavailable: 1, max_failed: 1 });
    printReport('rolling refit to version "3", one engine at a time', third);
    for (const w of third.body.waves ?? [])
      say(`  wave ${w.index + 1}: ${w.engines.length} engine, ${w.status}, drained in ${w.drain_ms} ms, refit in ${w.duration_ms} ms`);
    const v3 = await generateVersion(gw.url);
    say(`  next /generate: meta_info.weight_version = ${JSON.stringify(v3)}`);
    say();

    const deadNamed = second.body.failed?.some((f: { url: string; error?: string }) => f.url === victim.url && f.error === 'upstream_unreachable');
    const liveRolled = sims
      .filter((s) => s !== victim)
      .every((s) => third.body.engines?.some((e: { url: string; outcome: string }) => e.url === s.url && e.outcome === 'ok'));
    const ok = first.status === 200 && v1 === '1' && second.status === 207 && deadNamed && v2 === '2' && liveRolled && v3 === '3';
    say(ok ? `demo finished in ${((Date.now() - started) / 1000).toFixed(1)} s: every step behaved as expected` : 'demo FAILED: see the reports above');
    return ok ? 0 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}

interface Answer {
  status: number;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any -- printed, not trusted
}

async function refit(base: string, version: string, strategy?: Record<string, unknown>): Promise<Answer> {
  const res = await request(`${base}/v1/rl/refits`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ weight_version: version, source: { kind: 'disk', model_path: `/models/demo-step-${version}` }, ...(strategy ? { strategy } : {}) }),
  });
  return { status: res.statusCode, body: await res.body.json() };
}

function printReport(title: string, a: Answer): void {
  const r = a.body;
  process.stdout.write(`${title}: HTTP ${a.status}, ${r.status}, ${r.succeeded}/${r.total} engines, ${r.duration_ms} ms\n`);
  for (const e of r.engines ?? []) {
    const p = e.phases;
    const timing = `pause ${p.pause ?? '-'} ms, refit ${p.refit ?? '-'} ms, resume ${p.resume ?? '-'} ms`;
    const why = e.outcome === 'ok' ? '' : `  ${e.error} in ${e.failed_phase}: ${e.message}`;
    process.stdout.write(`  ${e.url.padEnd(24)} ${e.outcome.padEnd(6)} version=${String(e.weight_version).padEnd(4)} breaker=${e.breaker}  ${timing}${why}\n`);
  }
}

async function generateVersion(base: string): Promise<string | undefined> {
  const res = await request(`${base}/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ text: 'The capital of France is', sampling_params: { max_new_tokens: 8 } }),
  });
  const body = (await res.body.json()) as { meta_info?: { weight_version?: string } };
  if (res.statusCode !== 200) process.stdout.write(`  /generate answered ${res.statusCode}: ${JSON.stringify(body)}\n`);
  return body.meta_info?.weight_version;
}

async function waitReady(base: string, n: number): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const res = await request(`${base}/v1/rl/workers`);
    const body = (await res.body.json()) as { workers: Array<{ health: string }> };
    if (body.workers.length === n && body.workers.every((w) => w.health === 'ready')) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`the ${n} engines did not become ready within 20 s`);
}
