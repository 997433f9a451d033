// The gRPC face: one grpc-js server carrying `tokenspeed.grpc.scheduler.TokenSpeedScheduler`
// (Generate + servicer.ts) and `grpc.health.v1.Health`. Every call is recorded, then rpc faults
// apply (delay, exit, hang, error status, canned answer), then the handler runs. It owns the
// listener; engine behaviour lives in the handler files.

import * as grpc from '@grpc/grpc-js';
import type { TsEngine } from './engine.ts';
import { rpcMatch, type FaultRule } from './faults.ts';
import { generate, RpcError, type GenerateCall } from './generate.ts';
import { loadProtos, SCHEDULER_SERVICE } from './proto.ts';
import { streamHandlers, unaryHandlers } from './servicer.ts';

type Req = Record<string, any>;
type Msg = Record<string, unknown>;

export interface GrpcFace {
  port: number;
  /** Health turns NOT_SERVING (Check and open Watch streams); used on SIGTERM. */
  markNotServing(): void;
  /** Ends subscriptions, lets finished calls flush their status, then closes (force after `graceMs`). */
  drainClose(graceMs: number): Promise<void>;
  /** Drops every call and closes the port. */
  close(): void;
}

const HEALTH_SERVICES = new Set(['', SCHEDULER_SERVICE]);
const SERVING = 'SERVING';
const NOT_SERVING = 'NOT_SERVING';

function metadataOf(md: grpc.Metadata): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(md.getMap())) out[k] = Buffer.isBuffer(v) ? v.toString('base64') : v;
  return out;
}

function sleep(engine: TsEngine, ms: number, timers: Set<NodeJS.Timeout>): Promise<void> {
  engine.holds.delayed++;
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      timers.delete(t);
      engine.holds.delayed--;
      resolve();
    }, ms);
    timers.add(t);
  });
}

export async function startGrpc(engine: TsEngine, exit: (code: number) => void): Promise<GrpcFace> {
  const { scheduler, health } = loadProtos();
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 64 * 1024 * 1024 });
  const timers = new Set<NodeJS.Timeout>();
  const unary = unaryHandlers(engine);
  const streams = streamHandlers(engine);
  const record = (rpc: string, call: { metadata: grpc.Metadata; request: unknown }): void => {
    engine.recorder.rpcs.add({ rpc, metadata: metadataOf(call.metadata), request: call.request });
  };

  /** Applies the fault's delay/exit/hang/status; true when the call was answered (or held) by it. */
  const applyFault = async (rule: FaultRule, fail: (code: number, details: string) => void, cancelled: () => boolean): Promise<boolean> => {
    const f = rule.fault;
    if (f.delayMs) await sleep(engine, f.delayMs, timers);
    if (cancelled()) return true;
    if (f.exit !== undefined && f.exit !== false) {
      exit(f.exit === true ? 1 : f.exit);
      return true;
    }
    if (f.hang) {
      const end = (): void => {
        engine.holds.hung.delete(end);
        fail(grpc.status.UNAVAILABLE, 'released by the simulator');
      };
      engine.holds.hung.add(end);
      return true;
    }
    if (rule.grpcCode !== null) {
      fail(rule.grpcCode, f.message ?? 'injected fault');
      return true;
    }
    return false;
  };

  const implementation: grpc.UntypedServiceImplementation = {};
  for (const [name, handler] of Object.entries(unary)) {
    implementation[name] = (call: grpc.ServerUnaryCall<Req, Msg>, callback: grpc.sendUnaryData<Msg>) => {
      record(name, call);
      let answered = false;
      const fail = (code: number, details: string): void => {
        if (answered) return;
        answered = true;
        callback({ code, details });
      };
      const answer = (msg: Msg): void => {
        if (answered) return;
        answered = true;
        callback(null, msg);
      };
      const run = async (): Promise<void> => {
        const rule = engine.faults.take(rpcMatch(name));
        if (rule) {
          if (await applyFault(rule, fail, () => call.cancelled)) return;
          if (rule.fault.response) return answer(rule.fault.response);
        }
        answer(await handler(call.request));
      };
      run().catch((e: unknown) => {
        if (e instanceof RpcError) fail(e.code, e.message);
        else fail(grpc.status.INTERNAL, (e as Error)?.message ?? String(e));
      });
    };
  }
  const streaming: Record<string, (call: grpc.ServerWritableStream<Req, Msg>, rule: FaultRule | null) => void> = {
    ...Object.fromEntries(Object.entries(streams).map(([k, h]) => [k, (call: grpc.ServerWritableStream<Req, Msg>) => h(call)])),
    Generate: (call, rule) => generate(engine, call as GenerateCall, rule),
  };
  for (const [name, handler] of Object.entries(streaming)) {
    implementation[name] = (call: grpc.ServerWritableStream<Req, Msg>) => {
      record(name, call);
      const fail = (code: number, details: string): void => {
        if (!call.cancelled) call.emit('error', { code, details });
      };
      const run = async (): Promise<void> => {
        const rule = engine.faults.take(rpcMatch(name));
        if (rule && (await applyFault(rule, fail, () => call.cancelled))) return;
        handler(call, rule);
      };
      run().catch((e: unknown) => fail(grpc.status.INTERNAL, (e as Error)?.message ?? String(e)));
    };
  }
  server.addService(scheduler, implementation);

  // grpc.health.v1: SERVING for '' and the scheduler service until shutdown starts.
  const watchers = new Set<grpc.ServerWritableStream<Req, Msg>>();
  const healthStatus = (): string => (engine.shuttingDown ? NOT_SERVING : SERVING);
  server.addService(health, {
    Check: (call: grpc.ServerUnaryCall<Req, Msg>, callback: grpc.sendUnaryData<Msg>) => {
      record('grpc.health.v1.Health/Check', call);
      const service = String(call.request.service ?? '');
      if (!HEALTH_SERVICES.has(service)) return callback({ code: grpc.status.NOT_FOUND, details: `unknown service ${service}` });
      callback(null, { status: healthStatus() });
    },
    Watch: (call: grpc.ServerWritableStream<Req, Msg>) => {
      record('grpc.health.v1.Health/Watch', call);
      const service = String(call.request.service ?? '');
      call.write({ status: HEALTH_SERVICES.has(service) ? healthStatus() : 'SERVICE_UNKNOWN' });
      watchers.add(call);
      call.on('cancelled', () => watchers.delete(call));
    },
  });

  const host = engine.opts.host.includes(':') && !engine.opts.host.startsWith('[') ? `[${engine.opts.host}]` : engine.opts.host;
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(`${host}:${engine.opts.port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p)));
  });

  engine.grpcPort = port;
  const face: GrpcFace = {
    port,
    markNotServing() {
      for (const w of watchers) if (!w.cancelled) w.write({ status: NOT_SERVING });
    },
    async drainClose(graceMs) {
      for (const end of [...engine.subscriptions]) end();
      for (const w of watchers) w.end();
      watchers.clear();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, graceMs);
        }),
      ]);
      clearTimeout(timer);
      face.close();
    },
    close() {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      for (const w of watchers) w.end();
      watchers.clear();
      server.forceShutdown();
    },
  };
  return face;
}
