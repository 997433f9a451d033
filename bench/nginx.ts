// The data-plane benchmark's yardstick: nginx `proxy_pass` to the same simulator the gateway
// relays to, in a throw-away prefix under the run's log directory (no system config touched,
// nothing left running). It only starts and stops nginx; measuring is generate.ts's job.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { findExecutable } from './children.ts';

export const NGINX = findExecutable(['/usr/sbin/nginx', '/usr/bin/nginx']);

export interface NginxProxy {
  url: string;
  pid: number | undefined;
  version: string;
  stop(): Promise<void>;
}

/** A free loopback port (nginx takes a port number, not 0). */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/**
 * nginx in the foreground (master + `workers` worker processes) proxying every path to
 * `upstream` over kept-alive HTTP/1.1, unbuffered so SSE chunks pass as they come, no access log:
 * the configuration an operator would put in front of an engine.
 */
export async function startNginx(upstream: string, dir: string, workers = 1): Promise<NginxProxy> {
  if (!NGINX) throw new Error('nginx is not installed (apt-get install nginx)');
  const target = new URL(upstream);
  const port = await freePort();
  mkdirSync(join(dir, 'logs'), { recursive: true, mode: 0o777 });
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    [
      'daemon off;',
      `worker_processes ${workers};`,
      `pid ${join(dir, 'nginx.pid')};`,
      `error_log ${join(dir, 'logs/error.log')} warn;`,
      'events { worker_connections 4096; }',
      'http {',
      '  access_log off;',
      ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `  ${t}_temp_path ${join(dir, `${t}_temp`)};`),
      `  upstream engine { server ${target.hostname}:${target.port}; keepalive 256; }`,
      '  server {',
      `    listen 127.0.0.1:${port};`,
      '    location / {',
      '      proxy_pass http://engine;',
      '      proxy_http_version 1.1;',
      '      proxy_set_header Connection "";',
      '      proxy_buffering off;',
      '      proxy_read_timeout 3600s;',
      '    }',
      '  }',
      '}',
      '',
    ].join('\n'),
  );
  const v = spawnSync(NGINX, ['-v'], { encoding: 'utf8' }); // nginx prints its version on stderr
  const version = `${v.stderr ?? ''}${v.stdout ?? ''}`.trim();
  const proc: ChildProcess = spawn(NGINX, ['-p', dir, '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  // Ready when the port answers; nginx exits at once on a bad configuration.
  const until = Date.now() + 10_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`nginx exited (${proc.exitCode}): ${stderr.trim()}`);
    try {
      const res = await fetch(`${url}/health`);
      await res.arrayBuffer();
      break;
    } catch {
      if (Date.now() > until) {
        proc.kill('SIGKILL');
        throw new Error(`nginx did not answer on ${url} within 10 s: ${stderr.trim()}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    url,
    pid: proc.pid,
    version,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGQUIT'); // graceful: workers finish, then the master exits
        const t = setTimeout(() => proc.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(t);
      }
    },
  };
}
