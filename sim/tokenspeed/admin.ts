// The simulator's own admin HTTP server (`/_sim/*`, always on 127.0.0.1, no key, never recorded
// or faulted): state, the records of control requests and RPCs, faults, loaded weights, releasing
// hung calls, stopping/starting the control app, engine-side aborts with an HTTP-like code, and
// exit. It is separate from the control app so tests can reach it while that app is down.

import type { ServerResponse } from 'node:http';
import { badBody, engineRoutes, notAdminRoute } from '../core/admin.ts';
import { serveLocal, type LocalServer } from '../core/http-server.ts';
import { readJson, sendJson } from '../core/reply.ts';
import { abortFinish } from '../core/sequence.ts';
import type { TsEngine } from './engine.ts';
import { parseFaults } from './faults.ts';

export interface AdminHooks {
  stopControlApp(): Promise<boolean>;
  startControlApp(): Promise<boolean>;
  exit(code: number): void;
}

export type AdminServer = LocalServer;

async function handle(engine: TsEngine, hooks: AdminHooks, method: string, path: string, body: Buffer, res: ServerResponse): Promise<void> {
  const parsed = readJson(body);
  if (!parsed.ok) return badBody(res, 'the body must be JSON');
  const obj = (parsed.value ?? {}) as Record<string, unknown>;
  const route = `${method} ${path}`;
  if (engineRoutes(route, parsed.value, res, engine, parseFaults, hooks.exit)) return;
  switch (route) {
    case 'GET /_sim/requests':
      return sendJson(res, 200, engine.recorder.control.list());
    case 'GET /_sim/rpcs':
      return sendJson(res, 200, engine.recorder.rpcs.list());
    case 'DELETE /_sim/requests':
    case 'DELETE /_sim/rpcs':
      engine.recorder.clear();
      engine.concurrency.resetPeaks();
      return sendJson(res, 200, { cleared: true });
    case 'POST /_sim/control-app/stop':
      return sendJson(res, 200, { stopped: await hooks.stopControlApp(), controlApp: engine.controlApp });
    case 'POST /_sim/control-app/start':
      return sendJson(res, 200, { started: await hooks.startControlApp(), controlApp: engine.controlApp });
    case 'POST /_sim/abort': {
      // An engine-side abort: every matching stream ends with the status its code maps to.
      const code = obj.status_code ?? null;
      if (code !== null && !Number.isInteger(code)) return badBody(res, 'status_code must be an integer or null');
      const rid = typeof obj.rid === 'string' ? obj.rid : null;
      if (rid === null && obj.all !== true) return badBody(res, 'give rid or all: true');
      const message = typeof obj.message === 'string' ? obj.message : 'Aborted by the engine';
      const n = engine.scheduler.abortWhere((r) => obj.all === true || r === rid || r.startsWith(`${rid}-n`), abortFinish(message, code as number | null));
      return sendJson(res, 200, { aborted: n });
    }
    case 'POST /_sim/weight-version': {
      if (typeof obj.weight_version !== 'string') return badBody(res, 'weight_version must be a string');
      engine.weightVersion = obj.weight_version;
      return sendJson(res, 200, { weight_version: engine.weightVersion });
    }
    default:
      return notAdminRoute(res, route);
  }
}

export function startAdmin(engine: TsEngine, hooks: AdminHooks, port: number): Promise<AdminServer> {
  return serveLocal(port, (req, res, body) => {
    const path = (req.url ?? '/').split('?')[0];
    handle(engine, hooks, req.method ?? 'GET', path, body, res).catch((e: unknown) => {
      sendJson(res, 500, { error: 'internal', message: (e as Error)?.message ?? String(e) });
    });
  });
}
