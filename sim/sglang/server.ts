// The SGLang simulator's HTTP server (plain node:http: it is the benchmarks' baseline). Every
// non-/_sim request goes through the shared front (sim/core/http-front.ts: recorded and counted,
// then faults, then the api key), then the route table below, which shows each SGLang route next
// to the file whose handler serves it. It shares no code with the gateway.

import { HttpFront, RouteTable, type FrontAnswers } from '../core/http-front.ts';
import { engineServer, listen } from '../core/http-server.ts';
import { callOf, EMPTY } from '../core/reply.ts';
import { handleAdmin } from './admin.ts';
import * as control from './control.ts';
import { SimEngine } from './engine.ts';
import { generate } from './generation.ts';
import * as group from './group.ts';
import { InfoRoutes } from './info.ts';
import { maintenanceRoutes } from './maintenance.ts';
import { chatCompletions, completions } from './openai.ts';
import { resolveOptions, type SglangSimOptions } from './options.ts';
import { BUF, sendConst, sendError } from './reply.ts';
import { tokenizeRoutes } from './tokenize.ts';
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

const GET = ['GET', 'HEAD'];
const POST = ['POST'];
const GET_POST = ['GET', 'HEAD', 'POST'];

function routeTable(info: InfoRoutes): RouteTable<SimEngine> {
  const t = new RouteTable<SimEngine>();
  // generation.ts, openai.ts
  t.add('/generate', ['POST', 'PUT'], generate, true);
  t.add('/v1/chat/completions', POST, chatCompletions, true);
  t.add('/v1/completions', POST, completions, true);
  // info.ts
  t.add('/v1/models', GET, info.models, true);
  t.add('/model_info', GET, info.modelInfo, true);
  t.add('/get_model_info', GET, info.modelInfo, true);
  t.add('/server_info', GET, info.serverInfo, true);
  t.add('/get_server_info', GET, info.serverInfo, true);
  t.add('/v1/loads', GET, info.loads, true);
  t.add('/get_load', GET, info.getLoad, true);
  // control.ts
  t.add('/health', GET, control.health, true);
  t.add('/health_generate', GET, control.healthGenerate, true);
  t.add('/ready', GET, control.ready, true);
  t.add('/ping', GET, (_e, c) => sendConst(c.res, 200, EMPTY), true);
  t.add('/get_weight_version', GET, control.deprecatedWeightVersion, true);
  t.add('/weight_version', GET, control.deprecatedWeightVersion, true);
  t.add('/pause_generation', POST, control.pauseGeneration);
  t.add('/continue_generation', POST, control.continueGeneration);
  t.add('/abort_request', POST, control.abortRequest);
  t.add('/flush_cache', GET_POST, control.flushCache);
  t.add('/release_memory_occupation', GET_POST, control.releaseMemoryOccupation);
  t.add('/resume_memory_occupation', GET_POST, control.resumeMemoryOccupation);
  t.add('/pause', GET_POST, control.vllmStyleOk);
  t.add('/resume', GET_POST, control.vllmStyleOk);
  // updates.ts, group.ts
  t.add('/update_weights_from_disk', POST, updates.updateWeightsFromDisk);
  t.add('/update_weights_from_tensor', POST, updates.updateWeightsFromTensor);
  t.add('/update_weights_from_ipc', POST, updates.updateWeightsFromIpc);
  t.add('/update_weight_version', POST, updates.updateWeightVersion);
  t.add('/init_weights_update_group', POST, group.initWeightsUpdateGroup);
  t.add('/update_weights_from_distributed', POST, group.updateWeightsFromDistributed);
  t.add('/destroy_weights_update_group', POST, group.destroyWeightsUpdateGroup);
  t.add('/get_weights_by_name', GET_POST, group.getWeightsByName);
  // maintenance.ts: /weights_checker, /post_process_weights, /pull_weights, /start_profile, /stop_profile
  maintenanceRoutes(t);
  // tokenize.ts: /v1/tokenize (+/tokenize), /v1/detokenize (+/detokenize)
  tokenizeRoutes(t);
  return t;
}

/** SGLang's api-key middleware lets these through without a key. */
function authExempt(path: string): boolean {
  return path.startsWith('/health') || path.startsWith('/metrics');
}

const ANSWERS: FrontAnswers = {
  unauthorized: (res) => sendConst(res, 401, BUF.unauthorized),
  notFound: (res) => sendConst(res, 404, BUF.notFound),
  methodNotAllowed: (res) => sendConst(res, 405, BUF.methodNotAllowed),
  internal: (res, message) => sendError(res, `internal simulator error: ${message}`, 500),
};

export async function startSglangSim(options: SglangSimOptions = {}): Promise<SglangSim> {
  const opts = resolveOptions(options);
  const engine = new SimEngine(opts);
  const info = new InfoRoutes(engine);
  const bearer = opts.apiKey === null ? null : `Bearer ${opts.apiKey}`;
  let exited = false;
  let stopped = false;
  const hardStop = (): void => {
    if (stopped) return;
    stopped = true;
    engine.close();
    front.clearTimers();
    engine.holds.releaseHung();
    server.closeAllConnections();
    server.close();
  };
  const exit = (code: number): void => {
    if (exited) return;
    exited = true;
    // Without an onExit hook (in-process use) an exit looks like a dead process: every
    // connection drops and the port stops answering.
    if (opts.onExit) opts.onExit(code);
    else hardStop();
  };
  const front = new HttpFront<SimEngine>({
    engine,
    routes: routeTable(info),
    log: engine.recorder,
    concurrency: engine.concurrency,
    holds: engine.holds,
    faults: engine.faults,
    authorized: (call) => bearer === null || authExempt(call.path) || call.req.headers.authorization === bearer,
    answers: ANSWERS,
    exit,
  });

  const server = engineServer((req, res, body) => {
    const call = callOf(req, res, body);
    if (call.path.startsWith('/_sim/')) return handleAdmin(engine, exit, call.method, call.path, body, res);
    front.handle(call);
  });
  server.headersTimeout = 66_000;
  const closed = new Promise<void>((resolve) => server.once('close', () => resolve()));

  const port = await listen(server, opts.port, opts.host);
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
