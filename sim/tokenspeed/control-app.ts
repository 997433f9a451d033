// The in-engine HTTP RL control app (spec/engines.md §3) on --rl-control-port: every request is
// recorded, then route faults apply, then the bearer check (constant-time; 401 `unauthorized`),
// then the route table below, which shows each SGLang-named route next to its handler. It can be
// stopped and started again on the same port without touching the engine (a crash of the app does
// not kill the engine).

import { timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as control from './control-routes.ts';
import type { TsEngine } from './engine.ts';
import { normaliseRoute, type FaultRule } from './faults.ts';
import * as refit from './refit.ts';
import { sendJson, type Call, type Handler } from './reply.ts';
import { controlUrlFor } from './server-args.ts';

interface Route {
  methods: ReadonlySet<string>;
  handler: Handler;
}

const GET = ['GET'];
const POST = ['POST'];

function routeTable(): Map<string, Route> {
  const t = new Map<string, Route>();
  const add = (path: string, methods: string[], handler: Handler): void => { t.set(path, { methods: new Set(methods), handler }); };
  // refit.ts
  add('/init_weights_update_group', POST, refit.initWeightsUpdateGroup);
  add('/update_weights_from_distributed', POST, refit.updateWeightsFromDistributed);
  add('/destroy_weights_update_group', POST, refit.destroyWeightsUpdateGroup);
  add('/update_weights_from_disk', POST, refit.refuseSource('update_weights_from_disk'));
  add('/update_weights_from_tensor', POST, refit.refuseSource('update_weights_from_tensor'));
  add('/update_weights_from_mooncake', POST, refit.updateWeightsFromMooncake);
  // control-routes.ts
  add('/pause_generation', POST, control.pauseGeneration);
  add('/continue_generation', POST, control.continueGeneration);
  add('/abort_request', POST, control.abortRequest);
  add('/flush_cache', ['GET', 'POST'], control.flushCache);
  add('/release_memory_occupation', POST, control.releaseMemoryOccupation);
  add('/resume_memory_occupation', POST, control.resumeMemoryOccupation);
  add('/health_generate', GET, control.healthGenerate);
  add('/v1/loads', GET, control.loads);
  add('/get_weight_version', GET, control.getWeightVersion);
  add('/update_weight_version', POST, control.updateWeightVersion);
  add('/model_info', GET, control.modelInfo);
  add('/server_info', GET, control.serverInfo);
  add('/is_paused', GET, control.isPaused);
  return t;
}

export interface ControlApp {
  /** The URL the app advertises (null for a wildcard bind) and the port it listens on. */
  readonly url: string | null;
  readonly port: number;
  readonly running: boolean;
  /** Stops listening and drops every connection; the engine keeps serving gRPC. */
  stop(): Promise<void>;
  /** Listens again on the same port. */
  start(): Promise<void>;
}

export async function startControlApp(engine: TsEngine, exit: (code: number) => void): Promise<ControlApp> {
  const o = engine.opts;
  const routes = routeTable();
  const key = o.rlControlApiKey === null ? null : Buffer.from(`Bearer ${o.rlControlApiKey}`);
  const timers = new Set<NodeJS.Timeout>();
  let server: Server | null = null;
  let port = o.rlControlPort ?? 0;
  let url: string | null = null;

  const authorized = (req: IncomingMessage): boolean => {
    if (key === null) return true;
    const got = Buffer.from(req.headers.authorization ?? '');
    return got.length === key.length && timingSafeEqual(got, key);
  };

  const run = (call: Call): void => {
    if (!authorized(call.req)) return sendJson(call.res, 401, { success: false, message: 'unauthorized' });
    const route = routes.get(call.path);
    if (!route) return sendJson(call.res, 404, { detail: 'Not Found' });
    if (!route.methods.has(call.method)) return sendJson(call.res, 405, { detail: 'Method Not Allowed' });
    const fail = (e: unknown): void => {
      if (call.res.headersSent) call.res.destroy();
      else sendJson(call.res, 500, { success: false, message: (e as Error)?.message ?? String(e) });
    };
    try {
      const r = route.handler(engine, call);
      if (r) r.catch(fail);
    } catch (e) {
      fail(e);
    }
  };

  const applyFault = async (rule: FaultRule, call: Call): Promise<void> => {
    const f = rule.fault;
    if (f.delayMs) {
      engine.delayed++;
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => { timers.delete(t); resolve(); }, f.delayMs);
        timers.add(t);
      });
      engine.delayed--;
      if (call.res.destroyed) return;
    }
    if (f.exit !== undefined && f.exit !== false) return exit(f.exit === true ? 1 : f.exit);
    if (f.drop) { call.req.socket.destroy(); return; }
    if (f.hang) {
      const end = (): void => { engine.hung.delete(end); call.res.destroy(); };
      engine.hung.add(end);
      call.res.on('close', () => engine.hung.delete(end));
      return;
    }
    if (f.status !== undefined || f.body !== undefined) {
      const status = f.status ?? 200;
      const text = typeof f.body === 'string';
      const body = Buffer.from(text ? (f.body as string) : JSON.stringify(f.body ?? { success: status < 400, message: status < 400 ? 'ok' : 'injected fault' }));
      const headers: Record<string, string | number> = { ...(f.headers ?? {}), 'content-length': body.length };
      const type = f.contentType === undefined ? (text ? 'text/plain; charset=utf-8' : 'application/json') : f.contentType;
      if (type !== null) headers['content-type'] = type;
      call.res.writeHead(status, headers);
      call.res.end(body);
      return;
    }
    run({ ...call, claimSuccess: f.claimSuccessWithoutApplying === true });
  };

  const dispatch = (req: IncomingMessage, res: ServerResponse, body: Buffer): void => {
    const raw = req.url ?? '/';
    const q = raw.indexOf('?');
    const path = q < 0 ? raw : raw.slice(0, q);
    const query = q < 0 ? '' : raw.slice(q + 1);
    const method = req.method ?? 'GET';
    engine.recorder.control.add({
      method, path, query, headers: { ...req.headers }, body: body.toString('utf8'), bodyBytes: body.length, httpVersion: req.httpVersion, remotePort: req.socket.remotePort,
    });
    engine.controlInFlight++;
    engine.peakControlInFlight = Math.max(engine.peakControlInFlight, engine.controlInFlight);
    res.once('close', () => { engine.controlInFlight--; });
    const call: Call = { req, res, method, path, query, body, claimSuccess: false };
    const rule = engine.faults.takeRoute(method, normaliseRoute(path));
    if (rule) {
      applyFault(rule, call).catch(() => res.destroy());
      return;
    }
    run(call);
  };

  const listen = async (): Promise<void> => {
    const s = createServer({ noDelay: true, requestTimeout: 0, keepAliveTimeout: 65_000 });
    s.on('request', (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('error', () => res.destroy());
      req.on('end', () => dispatch(req, res, Buffer.concat(chunks)));
    });
    s.on('clientError', (_err, socket) => socket.destroy());
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(port, o.rlControlHost, () => { s.off('error', reject); resolve(); });
    });
    server = s;
    port = (s.address() as AddressInfo).port;
    url = controlUrlFor(o.rlControlHost, port);
    engine.controlUrl = url;
    engine.controlPort = port;
    engine.controlApp = 'running';
  };

  await listen();
  return {
    get url() { return url; },
    get port() { return port; },
    get running() { return server !== null; },
    async stop() {
      const s = server;
      if (!s) return;
      server = null;
      // The servicer keeps advertising the configured URL, as a real engine whose app crashed does.
      engine.controlApp = 'stopped';
      for (const t of timers) clearTimeout(t);
      timers.clear();
      const closed = new Promise<void>((resolve) => s.close(() => resolve()));
      s.closeAllConnections();
      await closed;
    },
    async start() {
      if (!server) await listen();
    },
  };
}
