// The `/_sim/*` admin routes every simulated engine answers alike (never recorded, never faulted,
// no key, so a test can always reach them): state, the fault table's four routes, loaded weights,
// releasing hung calls, exit, and the bad-body and not-found answers. Each simulator's admin file
// keeps its own routes (its records, its extra switches) and decides how strictly it reads a
// body; this file never owns engine state.

import type { ServerResponse } from 'node:http';
import { FaultError, type FaultTable, type Rule } from './faults.ts';
import type { Holds } from './holds.ts';
import { sendJson } from './reply.ts';

/** What the shared admin routes read of an engine. */
export interface AdminEngine<R extends Rule> {
  /** Everything `GET /_sim/state` reports. */
  state(): Record<string, unknown>;
  readonly weights: { snapshot(): Record<string, unknown> };
  readonly holds: Holds;
  readonly faults: FaultTable<R>;
}

export function badBody(res: ServerResponse, message: string): void {
  sendJson(res, 400, { error: 'invalid_body', message });
}

export function notAdminRoute(res: ServerResponse, route: string): void {
  sendJson(res, 404, { error: 'not_found', message: `no simulator admin route ${route}` });
}

/**
 * Answers `route` (`METHOD /path`) when it is one of the shared routes; false otherwise. `body`
 * is the request's JSON (undefined when there was none); `parse` is the simulator's fault parser.
 */
export function engineRoutes<R extends Rule>(
  route: string,
  body: unknown,
  res: ServerResponse,
  engine: AdminEngine<R>,
  parse: (input: unknown) => R[],
  exit: (code: number) => void,
): boolean {
  switch (route) {
    case 'GET /_sim/state':
      sendJson(res, 200, engine.state());
      return true;
    case 'GET /_sim/weights':
      sendJson(res, 200, engine.weights.snapshot());
      return true;
    case 'POST /_sim/release-hung':
      sendJson(res, 200, { released: engine.holds.releaseHung() });
      return true;
    case 'POST /_sim/exit': {
      // Answer first, so the caller knows the exit was asked for, then go.
      const raw = (body as { code?: unknown } | null | undefined)?.code;
      const code = Number.isInteger(raw) ? (raw as number) : 0;
      res.on('finish', () => setImmediate(() => exit(code)));
      sendJson(res, 200, { exiting: true, code });
      return true;
    }
    default:
      return faultRoutes(route, body, res, engine.faults, parse);
  }
}

/** `GET /_sim/faults` · `POST` (append) · `PUT` (replace) · `DELETE` over `table`. */
function faultRoutes<R extends Rule>(route: string, body: unknown, res: ServerResponse, table: FaultTable<R>, parse: (input: unknown) => R[]): boolean {
  switch (route) {
    case 'GET /_sim/faults':
      sendJson(res, 200, table.list());
      return true;
    case 'POST /_sim/faults':
    case 'PUT /_sim/faults': {
      if (body === undefined) {
        badBody(res, 'a JSON fault object or list is required');
        return true;
      }
      try {
        const rules = parse(body);
        if (route.startsWith('PUT')) table.replace(rules);
        else table.add(rules);
      } catch (e) {
        if (!(e instanceof FaultError)) throw e;
        badBody(res, e.message);
        return true;
      }
      sendJson(res, 200, table.list());
      return true;
    }
    case 'DELETE /_sim/faults':
      table.clear();
      sendJson(res, 200, []);
      return true;
    default:
      return false;
  }
}
