// The in-engine HTTP RL control app on --rl-control-port: every request goes
// through the shared front (sim/core/http-front.ts: recorded and counted, then route faults, then
// the bearer check, here constant-time with a 401 `unauthorized`), then the route table below,
// which shows each SGLang-named route next to its handler. It can be stopped and started again on
// the same port without touching the engine (a crash of the app does not kill the engine).

import { timingSafeEqual } from 'node:crypto';
import type { Server } from 'node:http';
import { HttpFront, RouteTable, type FrontAnswers } from '../core/http-front.ts';
import { engineServer, listen, shut } from '../core/http-server.ts';
import { callOf, sendJson, type Call } from '../core/reply.ts';
import * as control from './control-routes.ts';
import type { TsEngine } from './engine.ts';
import * as refit from './refit.ts';
import { controlUrlFor } from './server-args.ts';

const GET = ['GET'];
const POST = ['POST'];

function routeTable(): RouteTable<TsEngine> {
  const t = new RouteTable<TsEngine>();
  // refit.ts
  t.add('/init_weights_update_group', POST, refit.initWeightsUpdateGroup);
  t.add('/update_weights_from_distributed', POST, refit.updateWeightsFromDistributed);
  t.add('/destroy_weights_update_group', POST, refit.destroyWeightsUpdateGroup);
  t.add('/update_weights_from_disk', POST, refit.refuseSource('update_weights_from_disk'));
  t.add('/update_weights_from_tensor', POST, refit.refuseSource('update_weights_from_tensor'));
  t.add('/update_weights_from_mooncake', POST, refit.updateWeightsFromMooncake);
  // control-routes.ts
  t.add('/pause_generation', POST, control.pauseGeneration);
  t.add('/continue_generation', POST, control.continueGeneration);
  t.add('/abort_request', POST, control.abortRequest);
  t.add('/flush_cache', ['GET', 'POST'], control.flushCache);
  t.add('/release_memory_occupation', POST, control.releaseMemoryOccupation);
  t.add('/resume_memory_occupation', POST, control.resumeMemoryOccupation);
  t.add('/health_generate', GET, control.healthGenerate);
  t.add('/v1/loads', GET, control.loads);
  t.add('/get_weight_version', GET, control.getWeightVersion);
  t.add('/update_weight_version', POST, control.updateWeightVersion);
  t.add('/model_info', GET, control.modelInfo);
  t.add('/server_info', GET, control.serverInfo);
  t.add('/is_paused', GET, control.isPaused);
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

const ANSWERS: FrontAnswers = {
  unauthorized: (res) => sendJson(res, 401, { success: false, message: 'unauthorized' }),
  notFound: (res) => sendJson(res, 404, { detail: 'Not Found' }),
  methodNotAllowed: (res) => sendJson(res, 405, { detail: 'Method Not Allowed' }),
  internal: (res, message) => sendJson(res, 500, { success: false, message }),
};

export async function startControlApp(engine: TsEngine, exit: (code: number) => void): Promise<ControlApp> {
  const o = engine.opts;
  const key = o.rlControlApiKey === null ? null : Buffer.from(`Bearer ${o.rlControlApiKey}`);
  let server: Server | null = null;
  let port = o.rlControlPort ?? 0;
  let url: string | null = null;

  const authorized = (call: Call): boolean => {
    if (key === null) return true;
    const got = Buffer.from(call.req.headers.authorization ?? '');
    return got.length === key.length && timingSafeEqual(got, key);
  };
  const front = new HttpFront<TsEngine>({
    engine,
    routes: routeTable(),
    log: engine.recorder.control,
    concurrency: engine.concurrency,
    holds: engine.holds,
    faults: engine.faults,
    authorized,
    answers: ANSWERS,
    exit,
  });

  const start = async (): Promise<void> => {
    const s = engineServer((req, res, body) => front.handle(callOf(req, res, body)));
    port = await listen(s, port, o.rlControlHost);
    server = s;
    url = controlUrlFor(o.rlControlHost, port);
    engine.controlUrl = url;
    engine.controlPort = port;
    engine.controlApp = 'running';
  };

  await start();
  return {
    get url() {
      return url;
    },
    get port() {
      return port;
    },
    get running() {
      return server !== null;
    },
    async stop() {
      const s = server;
      if (!s) return;
      server = null;
      // The servicer keeps advertising the configured URL, as a real engine whose app crashed does.
      engine.controlApp = 'stopped';
      front.clearTimers();
      await shut(s);
    },
    async start() {
      if (!server) await start();
    },
  };
}
