// The SGLang simulator's HTTP server (plain node:http: it is the benchmarks' baseline). Every
// non-/_sim request is recorded and counted, then faults apply, then the api key, then the route
// table below, which shows each SGLang route next to the file whose handler serves it.
// It shares no code with the gateway.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { handleAdmin, type AdminHooks } from './admin.ts';
import * as control from './control.ts';
import { SimEngine } from './engine.ts';
import { normaliseRoute, type FaultAction } from './faults.ts';
import { generate } from './generation.ts';
import * as group from './group.ts';
import { InfoRoutes } from './info.ts';
import { chatCompletions, completions } from './openai.ts';
import { resolveOptions, type SglangSimOptions } from './options.ts';
import { BUF, EMPTY, sendConst, sendError, type Call } from './reply.ts';
import * as updates from './updates.ts';

export type { SglangSimOptions } from './options.ts';

export interface SglangSim {
  url: string;
  port: number;
  /** Stops accepting, drops every connection (hung and streaming ones too), closes groups. */
  close(): Promise<void>;
  /** The same snapshot GET /_sim/state returns. */
  state(): Record<string, unknown>;
}

type Handler = (engine: SimEngine, call: Call) => void | Promise<void>;

interface Route {
  methods: ReadonlySet<string>;
  handler: Handler;
  /** Data-plane routes are left out of the control-concurrency counter. */
  dataPlane: boolean;
}

const GET = ['GET', 'HEAD'];
const POST = ['POST'];
const GET_POST = ['GET', 'HEAD', 'POST'];

function routeTable(info: InfoRoutes): Map<string, Route> {
  const t = new Map<string, Route>();
  const add = (path: string, methods: string[], handler: Handler, dataPlane = false): void => {
    t.set(path, { methods: new Set(methods), handler, dataPlane });
  };
  // generation.ts, openai.ts
  add('/generate', ['POST', 'PUT'], generate, true);
  add('/v1/chat/completions', POST, chatCompletions, true);
  add('/v1/completions', POST, completions, true);
  // info.ts
  add('/v1/models', GET, info.models, true);
  add('/model_info', GET, info.modelInfo, true);
  add('/get_model_info', GET, info.modelInfo, true);
  add('/server_info', GET, info.serverInfo, true);
  add('/get_server_info', GET, info.serverInfo, true);
  add('/v1/loads', GET, info.loads, true);
  add('/get_load', GET, info.getLoad, true);
  // control.ts
  add('/health', GET, control.health, true);
  add('/health_generate', GET, control.healthGenerate, true);
  add('/ready', GET, control.ready, true);
  add('/ping', GET, (_e, c) => sendConst(c.res, 200, EMPTY), true);
  add('/get_weight_version', GET, control.deprecatedWeightVersion, true);
  add('/weight_version', GET, control.deprecatedWeightVersion, true);
  add('/pause_generation', POST, control.pauseGeneration);
  add('/continue_generation', POST, control.continueGeneration);
  add('/abort_request', POST, control.abortRequest);
  add('/flush_cache', GET_POST, control.flushCache);
  add('/release_memory_occupation', GET_POST, control.releaseMemoryOccupation);
  add('/resume_memory_occupation', GET_POST, control.resumeMemoryOccupation);
  add('/pause', GET_POST, control.vllmStyleOk);
  add('/resume', GET_POST, control.vllmStyleOk);
  // updates.ts, group.ts
  add('/update_weights_from_disk', POST, updates.updateWeightsFromDisk);
  add('/update_weights_from_tensor', POST, updates.updateWeightsFromTensor);
  add('/update_weights_from_ipc', POST, updates.updateWeightsFromIpc);
  add('/update_weight_version', POST, updates.updateWeightVersion);
  add('/init_weights_update_group', POST, group.initWeightsUpdateGroup);
  add('/update_weights_from_distributed', POST, group.updateWeightsFromDistributed);
  add('/destroy_weights_update_group', POST, group.destroyWeightsUpdateGroup);
  add('/get_weights_by_name', GET_POST, group.getWeightsByName);
  return t;
}

/** SGLang's api-key middleware lets these through without a key. */
function authExempt(path: string): boolean {
  return path.startsWith('/health') || path.startsWith('/metrics');
}

export async function startSglangSim(options: SglangSimOptions = {}): Promise<SglangSim> {
  const opts = resolveOptions(options);
  const engine = new SimEngine(opts);
  const info = new InfoRoutes(engine);
  const routes = routeTable(info);
  const bearer = opts.apiKey === null ? null : `Bearer ${opts.apiKey}`;
  const delayTimers = new Set<NodeJS.Timeout>();
  let exited = false;

  const server = createServer({ noDelay: true, requestTimeout: 0, keepAliveTimeout: 65_000 });
  server.headersTimeout = 66_000;

  const closed = new Promise<void>((resolve) => server.once('close', () => resolve()));
  let stopped = false;
  const hardStop = (): void => {
    if (stopped) return;
    stopped = true;
    engine.close();
    for (const t of delayTimers) clearTimeout(t);
    delayTimers.clear();
    for (const r of engine.hung) r.destroy();
    server.closeAllConnections();
    server.close();
  };
  const hooks: AdminHooks = {
    releaseHung() {
      const n = engine.hung.size;
      for (const r of [...engine.hung]) r.destroy();
      return n;
    },
    exit(code) {
      if (exited) return;
      exited = true;
      // Without an onExit hook (in-process use) an exit looks like a dead process: every
      // connection drops and the port stops answering.
      if (opts.onExit) opts.onExit(code);
      else hardStop();
    },
  };

  const run = (route: Route | undefined, call: Call): void => {
    const { req, res } = call;
    if (bearer !== null && !authExempt(call.path) && req.headers.authorization !== bearer) {
      return sendConst(res, 401, BUF.unauthorized);
    }
    if (!route) return sendConst(res, 404, BUF.notFound);
    if (!route.methods.has(call.method)) return sendConst(res, 405, BUF.methodNotAllowed);
    const fail = (e: unknown): void => {
      if (res.headersSent) res.destroy();
      else sendError(res, `internal simulator error: ${(e as Error)?.message ?? String(e)}`, 500);
    };
    try {
      const r = route.handler(engine, call);
      if (r) r.catch(fail);
    } catch (e) {
      fail(e);
    }
  };

  const applyFault = async (action: FaultAction, route: Route | undefined, call: Call): Promise<void> => {
    const f = action.fault;
    const { req, res } = call;
    if (f.delayMs) {
      engine.delayed++;
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => { delayTimers.delete(t); resolve(); }, f.delayMs);
        delayTimers.add(t);
      });
      engine.delayed--;
      if (res.destroyed && !f.runIfAbandoned) return;
    }
    if (f.exit !== undefined && f.exit !== false) return hooks.exit(f.exit === true ? 1 : f.exit);
    if (f.drop) { req.socket.destroy(); return; }
    if (f.hang) {
      engine.hung.add(res);
      res.on('close', () => engine.hung.delete(res));
      return;
    }
    if (action.canned) {
      res.writeHead(action.canned.status, action.canned.headers);
      res.end(action.canned.body);
      return;
    }
    run(route, { ...call, claimSuccess: f.claimSuccessWithoutApplying === true });
  };

  const dispatch = (req: IncomingMessage, res: ServerResponse, body: Buffer): void => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const query = q < 0 ? '' : url.slice(q + 1);
    const method = req.method ?? 'GET';
    if (path.startsWith('/_sim/')) return handleAdmin(engine, hooks, method, path, body, res);
    if (engine.recorder.enabled) {
      engine.recorder.add({
        method, path, query, headers: req.headers, body: body.toString('utf8'), bodyBytes: body.length,
        httpVersion: req.httpVersion, remotePort: req.socket.remotePort,
      });
    } else {
      engine.recorder.count();
    }
    const route = routes.get(path);
    const leave = engine.concurrency.enter(!route?.dataPlane);
    res.on('close', leave);
    const call: Call = { req, res, method, path, query, body, claimSuccess: false };
    const action = engine.faults.take(method, normaliseRoute(path));
    if (action) {
      applyFault(action, route, call).catch(() => res.destroy());
      return;
    }
    run(route, call);
  };

  server.on('request', (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => res.destroy());
    req.on('end', () => {
      const body = chunks.length === 0 ? EMPTY : chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      dispatch(req, res, body);
    });
  });
  server.on('clientError', (_err, socket) => socket.destroy());

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  info.setPort(port);
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;

  return {
    url: `http://${host}:${port}`,
    port,
    state: () => engine.state(),
    close: async () => {
      exited = true;
      hardStop();
      await closed;
    },
  };
}
