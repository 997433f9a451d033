// The ZMQ simulator's admin server (`/_sim/*`, 127.0.0.1 only, no key, never recorded): the lane
// routes under `/_sim/zmq/` (what the engine saw on the wire, lane faults), `/_sim/state` with the
// lane's state added, and every other `/_sim/*` route passed to the shared TokenSpeed engine's own
// admin server (control-route faults, control requests, weights, aborts, weight version, exit).

import type { IncomingMessage, ServerResponse } from 'node:http';
import { badBody } from '../core/admin.ts';
import { serveLocal, type LocalServer } from '../core/http-server.ts';
import { readJson, sendJson } from '../core/reply.ts';
import type { TsEngine } from '../tokenspeed/engine.ts';
import type { ZmqFace } from './face.ts';
import { parseFaults } from './faults.ts';

export type ZmqAdmin = LocalServer;

function lane(face: ZmqFace, method: string, path: string, body: Buffer, res: ServerResponse): void {
  const parsed = readJson(body);
  if (!parsed.ok) return badBody(res, 'the body must be JSON');
  const b = parsed.value;
  try {
    switch (`${method} ${path}`) {
      case 'GET /_sim/zmq/requests':
        return sendJson(res, 200, face.adds);
      case 'GET /_sim/zmq/aborts':
        return sendJson(res, 200, face.gatewayAborts);
      case 'DELETE /_sim/zmq/requests':
        face.adds.length = 0;
        face.gatewayAborts.length = 0;
        return sendJson(res, 200, { cleared: true });
      case 'GET /_sim/zmq/faults':
        return sendJson(res, 200, face.faults());
      case 'POST /_sim/zmq/faults':
        for (const f of parseFaults(b)) face.applyFault(f);
        return sendJson(res, 200, face.faults());
      case 'PUT /_sim/zmq/faults':
        face.clearFaults();
        for (const f of parseFaults(b)) face.applyFault(f);
        return sendJson(res, 200, face.faults());
      case 'DELETE /_sim/zmq/faults':
        face.clearFaults();
        return sendJson(res, 200, []);
      default:
        return sendJson(res, 404, { error: 'not_found', message: `no lane admin route ${method} ${path}` });
    }
  } catch (e) {
    return badBody(res, (e as Error).message);
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

export function startZmqAdmin(engine: TsEngine, face: ZmqFace, engineAdminUrl: string, port: number): Promise<ZmqAdmin> {
  return serveLocal(port, (req, res, body) => {
    const method = req.method ?? 'GET';
    const path = (req.url ?? '/').split('?')[0];
    if (path.startsWith('/_sim/zmq/')) return lane(face, method, path, body, res);
    if (method === 'GET' && path === '/_sim/state') return sendJson(res, 200, { ...engine.state(), zmq: face.state() });
    pass(engineAdminUrl, req, body, res).catch((e: unknown) => sendJson(res, 502, { error: 'engine_admin', message: (e as Error).message }));
  });
}
