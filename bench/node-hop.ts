// The floor for any Node gateway: fastify + one undici pool, relaying POST bodies to one
// upstream and piping the answer back, with no routing, no checks, no versions. The data-plane
// benchmark runs it beside nginx so rlgate's own cost can be told from the cost of Node's HTTP.
//
//   node --import tsx bench/node-hop.ts --upstream http://127.0.0.1:PORT
//   stdout: {"event":"listening","url":...,"pid":...}; stops on SIGTERM/SIGINT or stdin EOF.

import Fastify from 'fastify';
import { Pool } from 'undici';

const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length']);

async function main(): Promise<void> {
  const i = process.argv.indexOf('--upstream');
  const upstream = i >= 0 ? process.argv[i + 1] : undefined;
  if (!upstream) throw new Error('--upstream URL is required');
  const pool = new Pool(upstream, { connections: 256, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 0, bodyTimeout: 0 });
  const app = Fastify({ logger: false, bodyLimit: 64 * 1024 * 1024 });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  app.post('/*', async (req, reply) => {
    const res = await pool.request({ path: req.url, method: 'POST', headers: { 'content-type': 'application/json' }, body: req.body as Buffer });
    reply.code(res.statusCode);
    for (const [k, v] of Object.entries(res.headers)) if (v !== undefined && !HOP.has(k)) reply.header(k, v);
    return reply.send(res.body);
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  const stop = () =>
    void app
      .close()
      .then(() => pool.close())
      .finally(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  process.stdin.on('end', stop).resume();
  process.stdout.write(`${JSON.stringify({ event: 'listening', url, pid: process.pid })}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`node-hop: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exit(1);
});
