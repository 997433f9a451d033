// The simulator's own admin routes under `/_sim/` (never an SGLang path): state, the request
// record, faults, loaded-weight checksums, releasing hung calls, exit. They are not recorded, not
// faulted and not behind the api key, so a test can always reach them.

import type { ServerResponse } from 'node:http';
import type { SimEngine } from './engine.ts';
import { FaultError, parseFaults } from './faults.ts';
import { sendJson } from './reply.ts';

export interface AdminHooks {
  /** Destroys every response held by a `hang` fault; returns how many. */
  releaseHung(): number;
  exit(code: number): void;
}

function parseBody(body: Buffer): { ok: true; value: unknown } | { ok: false } {
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

export function handleAdmin(
  engine: SimEngine,
  hooks: AdminHooks,
  method: string,
  path: string,
  body: Buffer,
  res: ServerResponse,
): void {
  const route = `${method} ${path}`;
  switch (route) {
    case 'GET /_sim/state':
      return sendJson(res, 200, engine.state());
    case 'GET /_sim/requests':
      return sendJson(res, 200, engine.recorder.list());
    case 'DELETE /_sim/requests':
      engine.recorder.clear();
      engine.concurrency.resetPeaks();
      return sendJson(res, 200, { cleared: true });
    case 'GET /_sim/faults':
      return sendJson(res, 200, engine.faults.list());
    case 'POST /_sim/faults':
    case 'PUT /_sim/faults': {
      const parsed = parseBody(body);
      if (!parsed.ok || parsed.value === undefined) return bad(res, 'a JSON fault object or list is required');
      try {
        const faults = parseFaults(parsed.value);
        if (method === 'PUT') engine.faults.replace(faults);
        else engine.faults.add(faults);
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
      return sendJson(res, 200, { released: hooks.releaseHung() });
    case 'POST /_sim/exit': {
      const parsed = parseBody(body);
      const raw = parsed.ok ? (parsed.value as { code?: unknown } | undefined)?.code : undefined;
      const code = Number.isInteger(raw) ? (raw as number) : 0;
      // Answer first so the caller knows the exit was asked for, then go.
      res.on('finish', () => setImmediate(() => hooks.exit(code)));
      return sendJson(res, 200, { exiting: true, code });
    }
    default:
      return sendJson(res, 404, { error: 'not_found', message: `no simulator admin route ${route}` });
  }
}
