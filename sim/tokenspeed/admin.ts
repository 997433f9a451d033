// The simulator's own admin HTTP server (`/_sim/*`, always on 127.0.0.1, no key, never recorded
// or faulted): state, the records of control requests and RPCs, faults, loaded weights, releasing
// hung calls, stopping/starting the control app, engine-side aborts with an HTTP-like code, and
// exit. It is separate from the control app so tests can reach it while that app is down.

import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { abortFinish } from '../core/sequence.ts';
import type { TsEngine } from './engine.ts';
import { FaultError, parseFaults } from './faults.ts';
import { sendJson } from './reply.ts';

export interface AdminHooks {
  stopControlApp(): Promise<boolean>;
  startControlApp(): Promise<boolean>;
  exit(code: number): void;
}

export interface AdminServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

function parse(body: Buffer): { ok: true; value: Record<string, unknown> | unknown[] | undefined } | { ok: false } {
  if (body.length === 0) return { ok: true, value: undefined };
  try {
    return { ok: true, value: JSON.parse(body.toString('utf8')) };
  } catch {
    return { ok: false };
  }
}

function bad(res: ServerResponse, message: string): void {
  sendJson(res, 400, { error: 'invalid_body', message });
}

async function handle(engine: TsEngine, hooks: AdminHooks, method: string, path: string, body: Buffer, res: ServerResponse): Promise<void> {
  const parsed = parse(body);
  if (!parsed.ok) return bad(res, 'the body must be JSON');
  const obj = (parsed.value ?? {}) as Record<string, unknown>;
  switch (`${method} ${path}`) {
    case 'GET /_sim/state':
      return sendJson(res, 200, engine.state());
    case 'GET /_sim/requests':
      return sendJson(res, 200, engine.recorder.control.list());
    case 'GET /_sim/rpcs':
      return sendJson(res, 200, engine.recorder.rpcs.list());
    case 'DELETE /_sim/requests':
    case 'DELETE /_sim/rpcs':
      engine.recorder.clear();
      engine.peakControlInFlight = engine.controlInFlight;
      return sendJson(res, 200, { cleared: true });
    case 'GET /_sim/faults':
      return sendJson(res, 200, engine.faults.list());
    case 'POST /_sim/faults':
    case 'PUT /_sim/faults': {
      if (parsed.value === undefined) return bad(res, 'a JSON fault object or list is required');
      try {
        const rules = parseFaults(parsed.value);
        if (method === 'PUT') engine.faults.replace(rules);
        else engine.faults.add(rules);
      } catch (e) {
        if (e instanceof FaultError) return bad(res, e.message);
        throw e;
      }
      return sendJson(res, 200, engine.faults.list());
    }
    case 'DELETE /_sim/faults':
      engine.faults.clear();
      return sendJson(res, 200, []);
    case 'GET /_sim/weights':
      return sendJson(res, 200, engine.weights.snapshot());
    case 'POST /_sim/release-hung':
      return sendJson(res, 200, { released: engine.releaseHung() });
    case 'POST /_sim/control-app/stop':
      return sendJson(res, 200, { stopped: await hooks.stopControlApp(), controlApp: engine.controlApp });
    case 'POST /_sim/control-app/start':
      return sendJson(res, 200, { started: await hooks.startControlApp(), controlApp: engine.controlApp });
    case 'POST /_sim/abort': {
      // An engine-side abort: every matching stream ends with the status its code maps to.
      const code = obj.status_code ?? null;
      if (code !== null && !Number.isInteger(code)) return bad(res, 'status_code must be an integer or null');
      const rid = typeof obj.rid === 'string' ? obj.rid : null;
      if (rid === null && obj.all !== true) return bad(res, 'give rid or all: true');
      const message = typeof obj.message === 'string' ? obj.message : 'Aborted by the engine';
      const n = engine.scheduler.abortWhere((r) => obj.all === true || r === rid || r.startsWith(`${rid}-n`), abortFinish(message, code as number | null));
      return sendJson(res, 200, { aborted: n });
    }
    case 'POST /_sim/weight-version': {
      if (typeof obj.weight_version !== 'string') return bad(res, 'weight_version must be a string');
      engine.weightVersion = obj.weight_version;
      return sendJson(res, 200, { weight_version: engine.weightVersion });
    }
    case 'POST /_sim/exit': {
      const code = Number.isInteger(obj.code) ? (obj.code as number) : 0;
      res.on('finish', () => setImmediate(() => hooks.exit(code)));
      return sendJson(res, 200, { exiting: true, code });
    }
    default:
      return sendJson(res, 404, { error: 'not_found', message: `no simulator admin route ${method} ${path}` });
  }
}

export async function startAdmin(engine: TsEngine, hooks: AdminHooks, port: number): Promise<AdminServer> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = (req.url ?? '/').split('?')[0];
      handle(engine, hooks, req.method ?? 'GET', path, Buffer.concat(chunks), res).catch((e: unknown) => {
        sendJson(res, 500, { error: 'internal', message: (e as Error)?.message ?? String(e) });
      });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => { server.off('error', reject); resolve(); });
  });
  const bound = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}
