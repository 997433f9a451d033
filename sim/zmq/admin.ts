// The ZMQ simulator's admin server (`/_sim/*`, 127.0.0.1 only, no key, never recorded): the lane
// routes under `/_sim/zmq/` (what the engine saw on the wire, lane faults), `/_sim/state` with the
// lane's state added, and every other `/_sim/*` route passed to the shared TokenSpeed engine's own
// admin server (control-route faults, control requests, weights, aborts, weight version, exit).

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TsEngine } from '../tokenspeed/engine.ts';
import type { ZmqFace } from './face.ts';
import { parseFaults } from './faults.ts';

export interface ZmqAdmin {
  url: string;
  port: number;
  close(): Promise<void>;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const text = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': text.length });
  res.end(text);
}

function lane(face: ZmqFace, method: string, path: string, body: Buffer, res: ServerResponse): void {
  let b: unknown;
  try {
    b = body.length === 0 ? undefined : JSON.parse(body.toString('utf8'));
  } catch {
    return send(res, 400, { error: 'invalid_body', message: 'the body must be JSON' });
  }
  try {
    switch (`${method} ${path}`) {
      case 'GET /_sim/zmq/requests':
        return send(res, 200, face.adds);
      case 'GET /_sim/zmq/aborts':
        return send(res, 200, face.gatewayAborts);
      case 'DELETE /_sim/zmq/requests':
        face.adds.length = 0;
        face.gatewayAborts.length = 0;
        return send(res, 200, { cleared: true });
      case 'GET /_sim/zmq/faults':
        return send(res, 200, face.faults());
      case 'POST /_sim/zmq/faults':
        for (const f of parseFaults(b)) face.applyFault(f);
        return send(res, 200, face.faults());
      case 'PUT /_sim/zmq/faults':
        face.clearFaults();
        for (const f of parseFaults(b)) face.applyFault(f);
        return send(res, 200, face.faults());
      case 'DELETE /_sim/zmq/faults':
        face.clearFaults();
        return send(res, 200, []);
      default:
        return send(res, 404, { error: 'not_found', message: `no lane admin route ${method} ${path}` });
    }
  } catch (e) {
    return send(res, 400, { error: 'invalid_body', message: (e as Error).message });
  }
}

/** Passes one request to the engine's own admin server and copies its answer back. */
async function pass(engineAdmin: string, req: IncomingMessage, body: Buffer, res: ServerResponse): Promise<void> {
  const method = req.method ?? 'GET';
  const r = await fetch(`${engineAdmin}${req.url ?? '/'}`, {
    method,
    headers: body.length > 0 ? { 'content-type': 'application/json' } : undefined,
    body: body.length > 0 && method !== 'GET' ? body : undefined,
  });
  const text = Buffer.from(await r.arrayBuffer());
  if (res.headersSent || res.destroyed) return;
  res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json', 'content-length': text.length });
  res.end(text);
}

export async function startZmqAdmin(engine: TsEngine, face: ZmqFace, engineAdminUrl: string, port: number): Promise<ZmqAdmin> {
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const method = req.method ?? 'GET';
      const path = (req.url ?? '/').split('?')[0];
      if (path.startsWith('/_sim/zmq/')) return lane(face, method, path, body, res);
      if (method === 'GET' && path === '/_sim/state') return send(res, 200, { ...engine.state(), zmq: face.state() });
      pass(engineAdminUrl, req, body, res).catch((e: unknown) => send(res, 502, { error: 'engine_admin', message: (e as Error).message }));
    });
  });
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(port, '127.0.0.1', () => { server.off('error', fail); ok(); });
  });
  const bound = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    close: async () => {
      const closed = new Promise<void>((ok) => server.close(() => ok()));
      server.closeAllConnections();
      await closed;
    },
  };
}
