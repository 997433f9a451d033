// Starts one TokenSpeed-shaped engine: the shared engine state, the gRPC face, the RL control app
// (when --rl-control-port is set) and the admin server, and stops them (gracefully on SIGTERM:
// health turns NOT_SERVING, in-flight requests get the drain window). It holds no engine
// behaviour of its own.

import { TsEngine } from './engine.ts';
import { startGrpc, type GrpcFace } from './grpc-server.ts';
import { startHttpFaces, type HttpFaces } from './http-faces.ts';
import { resolveOptions, type TokenspeedSimOptions } from './options.ts';
import type { ServicerImpl } from './profile.ts';

export type { TokenspeedSimOptions } from './options.ts';

export interface TokenspeedSim {
  /** `grpc://host:port` */
  url: string;
  port: number;
  /** The control app's URL (null without --rl-control-port or for a wildcard bind). */
  controlUrl: string | null;
  controlPort: number | null;
  /** The `/_sim/*` admin server. */
  adminUrl: string;
  servicerImpl: ServicerImpl;
  /** SIGTERM behaviour: NOT_SERVING, drain in-flight requests up to the drain window, then close. */
  shutdown(): Promise<void>;
  /** Drops everything at once and closes every port. */
  close(): Promise<void>;
  state(): Record<string, unknown>;
}

export async function startTokenspeedSim(options: TokenspeedSimOptions = {}): Promise<TokenspeedSim> {
  const opts = resolveOptions(options);
  const engine = new TsEngine(opts);
  let grpcFace: GrpcFace | null = null;
  let http: HttpFaces | null = null;
  let closed = false;

  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    engine.shuttingDown = true;
    engine.close();
    grpcFace?.close();
    await http?.close();
  };
  let exited = false;
  const exit = (code: number): void => {
    if (exited) return;
    exited = true;
    // Without an onExit hook (in-process use) an exit looks like a dead process: ports close.
    if (opts.onExit) opts.onExit(code);
    else void close();
  };

  try {
    grpcFace = await startGrpc(engine, exit);
    http = await startHttpFaces(engine, exit, opts.adminPort);
  } catch (e) {
    await close();
    throw e;
  }
  const host = opts.host.includes(':') && !opts.host.startsWith('[') ? `[${opts.host}]` : opts.host;

  return {
    url: `grpc://${host}:${grpcFace.port}`,
    port: grpcFace.port,
    controlUrl: http.control?.url ?? null,
    controlPort: http.control?.port ?? null,
    adminUrl: http.admin.url,
    servicerImpl: opts.servicerImpl,
    state: () => engine.state(),
    close,
    async shutdown() {
      if (closed) return;
      engine.shuttingDown = true;
      grpcFace?.markNotServing();
      const drained = new Promise<void>((resolve) => {
        const check = (): void => {
          if (engine.scheduler.counts().live === 0 || closed) return resolve();
          setTimeout(check, 20).unref();
        };
        check();
      });
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        drained,
        new Promise<void>((r) => {
          timer = setTimeout(r, opts.drainMs);
        }),
      ]);
      clearTimeout(timer);
      // Calls that just ended still need their last messages and status on the wire.
      await grpcFace?.drainClose(1_000);
      await close();
    },
  };
}
