// The simulator's own admin routes under `/_sim/` (never an SGLang path): state, the request
// record, faults, loaded-weight checksums, releasing hung calls, exit. They are not recorded, not
// faulted and not behind the api key, so a test can always reach them (sim/core/admin.ts holds
// the routes every simulator answers alike).

import type { ServerResponse } from 'node:http';
import { engineRoutes, notAdminRoute } from '../core/admin.ts';
import { readJson, sendJson } from '../core/reply.ts';
import type { SimEngine } from './engine.ts';
import { parseFaults, ruleOf } from './faults.ts';

export function handleAdmin(engine: SimEngine, exit: (code: number) => void, method: string, path: string, body: Buffer, res: ServerResponse): void {
  const route = `${method} ${path}`;
  // A body that is not JSON counts as none: only the fault and exit routes read one.
  const parsed = readJson(body);
  const value = parsed.ok ? parsed.value : undefined;
  if (engineRoutes(route, value, res, engine, (v) => parseFaults(v).map(ruleOf), exit)) return;
  switch (route) {
    case 'GET /_sim/requests':
      return sendJson(res, 200, engine.recorder.list());
    case 'DELETE /_sim/requests':
      engine.recorder.clear();
      engine.concurrency.resetPeaks();
      return sendJson(res, 200, { cleared: true });
    default:
      return notAdminRoute(res, route);
  }
}
