// /generate while slow clients hold the gateway's connections: the speed half of the chaos scenario
// `slow-clients`, whose test asserts behaviour only (every /generate answered, every slow client
// answered 408 or closed in time). The gateway CLI with short header and body timeouts in front of
// one SGLang simulator; GENERATORS /generate loops, first alone, then while N slow clients (headers
// a byte at a time, a body stalled part-way, a body trickled slower than the body timeout allows)
// each hold a connection and reconnect when closed. It reports the latency of both phases and checks
// the bound the test used to assert: p99 during ≤ max(10 × p99 before, p99 before + 2 s). Writes
// bench/results/slow-clients-<ISO date>.{json,md}. It measures only.
//   node --import tsx bench/slow-clients.ts [--clients N] [--seconds S] [--out DIR]

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { loadavg, machineFacts, registerAll, ROOT, startFleet, startGateway } from './children.ts';
import { ms, rounded, summarize, type Summary } from './stats.ts';

const HEADER_TIMEOUT_SECS = 2;
const BODY_TIMEOUT_SECS = 3;
/** Well above the /generate loops, far below the slow clients (who must hold no slot). */
const MAX_IN_FLIGHT = 64;
const GENERATORS = 4;
/** One byte per tick for the dripping and trickling clients. */
const TICK_MS = 500;
/** The bound the chaos test asserted until speed moved here: ten times the baseline p99, or 2 s more. */
const BOUND = { ratio: 10, added_ms: 2_000 };
const GENERATE_BODY = JSON.stringify({ text: 'hello', sampling_params: { max_new_tokens: 8 } });

type Kind = 'header-drip' | 'body-stall' | 'body-trickle';
const KINDS: Kind[] = ['header-drip', 'body-stall', 'body-trickle'];

interface Args {
  clients: number;
  seconds: number;
  out: string;
}

function parse(argv: string[]): Args {
  const a: Args = { clients: 300, seconds: 10, out: join(ROOT, 'bench', 'results') };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--clients') a.clients = Number(argv[++i]);
    else if (argv[i] === '--seconds') a.seconds = Number(argv[++i]);
    else if (argv[i] === '--out') a.out = argv[++i]!;
    else throw new Error(`unknown flag ${argv[i]} (flags: --clients N, --seconds S, --out DIR)`);
  }
  if (!Number.isInteger(a.clients) || a.clients < 1) throw new Error('--clients wants a positive integer');
  if (!(a.seconds > 0)) throw new Error('--seconds wants a positive number');
  return a;
}

/** Slow clients that still have bytes to send: one shared ticker writes their next byte. */
const dripping = new Map<Socket, { bytes: Buffer; at: number }>();

/** One slow client: connects, misbehaves as its kind says; resolves with the status line's code (null: closed unanswered). */
function slowClient(port: number, kind: Kind): Promise<number | null> {
  const body = JSON.stringify({ text: 'slow', sampling_params: { max_new_tokens: 4 } });
  const head = `POST /generate HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const socket = connect(port, '127.0.0.1', () => {
      if (kind === 'header-drip') {
        const bytes = Buffer.from(`POST /generate HTTP/1.1\r\nHost: gw\r\nX-Slow: ${'a'.repeat(4_096)}`);
        socket.write(bytes.subarray(0, 1));
        dripping.set(socket, { bytes, at: 1 });
      } else if (kind === 'body-stall') {
        socket.write(head + body.slice(0, body.length / 2));
      } else {
        socket.write(head + body.slice(0, 1));
        dripping.set(socket, { bytes: Buffer.from(body), at: 1 });
      }
    });
    socket.on('data', (c: Buffer) => {
      chunks.push(c);
      dripping.delete(socket);
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      dripping.delete(socket);
      const m = /^HTTP\/1\.1 (\d{3}) /.exec(Buffer.concat(chunks).toString('latin1'));
      resolve(m ? Number(m[1]) : null);
    });
  });
}

/** GENERATORS /generate loops until `until`; each answer's wall time and status. */
async function generateLoops(url: string, agent: Agent, until: number): Promise<Array<{ ms: number; status: number }>> {
  const out: Array<{ ms: number; status: number }> = [];
  await Promise.all(
    Array.from({ length: GENERATORS }, async () => {
      while (performance.now() < until) {
        const t0 = performance.now();
        const res = await request(`${url}/generate`, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json' },
          body: GENERATE_BODY,
          headersTimeout: 60_000,
          bodyTimeout: 60_000,
        });
        await res.body.dump();
        out.push({ ms: performance.now() - t0, status: res.statusCode });
      }
    }),
  );
  return out;
}

async function main(): Promise<void> {
  const args = parse(process.argv.slice(2));
  const date = new Date();
  const machine = machineFacts();
  const logDir = mkdtempSync(join(os.tmpdir(), 'rlgate-bench-slow-'));
  const fleet = await startFleet(1, logDir, ['--token-rate', '0'], 'slow-clients');
  let gw: Awaited<ReturnType<typeof startGateway>> | undefined;
  const agent = new Agent({ connections: GENERATORS + 4 });
  const ticker = setInterval(() => {
    for (const [s, d] of dripping) {
      if (d.at >= d.bytes.length || s.destroyed) dripping.delete(s);
      else s.write(d.bytes.subarray(d.at, ++d.at));
    }
  }, TICK_MS);
  let before: Array<{ ms: number; status: number }>;
  let during: Array<{ ms: number; status: number }>;
  const slowStatuses = new Map<string, number>();
  try {
    gw = await startGateway(
      [
        '--log-level',
        'warn',
        '--request-header-timeout-secs',
        String(HEADER_TIMEOUT_SECS),
        '--request-body-timeout-secs',
        String(BODY_TIMEOUT_SECS),
        '--max-in-flight',
        String(MAX_IN_FLIGHT),
        // Twice the slow clients, as an operator would size it: a loaded gateway counts a closed
        // connection until it has handled the close.
        '--max-connections',
        String(2 * args.clients),
      ],
      logDir,
      undefined,
      'slow-clients',
    );
    await registerAll(gw.url, fleet.urls);
    const port = Number(new URL(gw.url).port);
    // Unmeasured: the gateway compiles its hot paths on its first requests.
    await generateLoops(gw.url, agent, performance.now() + 2_000);
    process.stdout.write(`bench: slow-clients: ${GENERATORS} /generate loops alone for ${args.seconds} s...\n`);
    before = await generateLoops(gw.url, agent, performance.now() + args.seconds * 1000);
    process.stdout.write(`bench: slow-clients: the same with ${args.clients} slow clients...\n`);
    const phaseEnds = performance.now() + args.seconds * 1000;
    const slots = Array.from({ length: args.clients }, async (_, i) => {
      const kind = KINDS[i % KINDS.length]!;
      // Opened 50 at a time, 20 ms apart, so the listen backlog is not what is measured.
      await new Promise((r) => setTimeout(r, Math.floor(i / 50) * 20));
      while (performance.now() < phaseEnds) {
        const status = await slowClient(port, kind);
        const key = status === null ? 'closed without answer' : String(status);
        slowStatuses.set(key, (slowStatuses.get(key) ?? 0) + 1);
      }
    });
    during = await generateLoops(gw.url, agent, phaseEnds);
    await Promise.all(slots);
  } finally {
    clearInterval(ticker);
    for (const s of dripping.keys()) s.destroy();
    await agent.close();
    await gw?.child.stop();
    await fleet.stop();
    rmSync(logDir, { recursive: true, force: true });
  }

  const b = rounded(summarize(before.map((x) => x.ms)));
  const d = rounded(summarize(during.map((x) => x.ms)));
  const boundMs = Math.max(BOUND.ratio * b.p99, b.p99 + BOUND.added_ms);
  const met = d.p99 <= boundMs;
  const row = (name: string, s: Summary, xs: Array<{ status: number }>) =>
    `| ${name} | ${s.n} | ${ms(s.p50)} | ${ms(s.p90)} | ${ms(s.p99)} | ${ms(s.max)} | ${xs.filter((x) => x.status !== 200).length} |`;
  const md = [
    `# /generate under slow clients, ${date.toISOString().slice(0, 10)}`,
    '',
    `Machine: ${machine.cores} cores (${machine.cpu_model}), ${machine.os}, Node ${machine.node}; load average (1/5/15 min) at start ${machine.loadavg_start.join(' ')}, at end ${loadavg().join(' ')}; commit ${machine.commit}; ${date.toISOString()}.`,
    '',
    `Set-up: the \`rlgate gateway\` CLI (header timeout ${HEADER_TIMEOUT_SECS} s, body timeout ${BODY_TIMEOUT_SECS} s, ` +
      `--max-in-flight ${MAX_IN_FLIGHT}, --max-connections ${2 * args.clients}) in front of one SGLang simulator answering at once; ` +
      `${GENERATORS} /generate loops in this process (undici, kept-alive), ${args.seconds} s alone, then ${args.seconds} s while ` +
      `${args.clients} slow clients (a third each: headers a byte every ${TICK_MS} ms, a body stalled half-way, a body a byte every ` +
      `${TICK_MS} ms) each hold a connection and reconnect when closed. ms.`,
    '',
    '| phase | requests | p50 | p90 | p99 | max | not 200 |',
    '|---|---:|---:|---:|---:|---:|---:|',
    row('alone', b, before),
    row(`${args.clients} slow clients`, d, during),
    '',
    `During ÷ alone: p50 ${(d.p50 / b.p50).toFixed(2)}×, p99 ${(d.p99 / b.p99).toFixed(2)}×. ` +
      `Bound: p99 during ≤ max(${BOUND.ratio} × p99 alone, p99 alone + ${BOUND.added_ms} ms) = ${ms(boundMs)} ms: ${met ? 'met' : '**missed**'}.`,
    '',
    `Slow connections: ${[...slowStatuses].map(([k, n]) => `${n} ${k === 'closed without answer' ? k : `answered ${k}`}`).join(', ')}.`,
    '',
  ].join('\n');
  const stamp = date
    .toISOString()
    .replace(/\.\d+Z$/, 'Z')
    .replace(/:/g, '-');
  mkdirSync(args.out, { recursive: true });
  const json = {
    benchmark: 'slow-clients',
    date: date.toISOString(),
    machine: { ...machine, loadavg_end: loadavg() },
    setup: { header_timeout_secs: HEADER_TIMEOUT_SECS, body_timeout_secs: BODY_TIMEOUT_SECS, max_in_flight: MAX_IN_FLIGHT, generators: GENERATORS, ...args },
    bound: { ...BOUND, ms: boundMs, met },
    generate_alone_ms: b,
    generate_during_ms: d,
    not_200: { alone: before.filter((x) => x.status !== 200).length, during: during.filter((x) => x.status !== 200).length },
    slow_connections: Object.fromEntries(slowStatuses),
  };
  writeFileSync(join(args.out, `slow-clients-${stamp}.json`), `${JSON.stringify(json, null, 1)}\n`);
  writeFileSync(join(args.out, `slow-clients-${stamp}.md`), md);
  process.stdout.write(`${md}\nwritten: ${join(args.out, `slow-clients-${stamp}.{json,md}`)}\n`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`slow-clients bench: ${(err as Error).message}\n`);
    process.exit(1);
  },
);
