// The TokenSpeed engine's two HTTP faces, started and stopped together: the RL control app (only
// with --rl-control-port) and the `/_sim/*` admin server, whose control-app switch stops and
// restarts that app. The gRPC engine (server.ts) and the ZMQ engine (sim/zmq) both run them
// beside their own face; this file holds no engine behaviour.

import { startAdmin, type AdminServer } from './admin.ts';
import { startControlApp, type ControlApp } from './control-app.ts';
import type { TsEngine } from './engine.ts';

export interface HttpFaces {
  /** null without --rl-control-port. */
  control: ControlApp | null;
  admin: AdminServer;
  close(): Promise<void>;
}

export async function startHttpFaces(engine: TsEngine, exit: (code: number) => void, adminPort: number): Promise<HttpFaces> {
  const control = engine.opts.rlControlPort === null ? null : await startControlApp(engine, exit);
  let admin: AdminServer;
  try {
    admin = await startAdmin(
      engine,
      {
        stopControlApp: async () => {
          if (!control?.running) return false;
          await control.stop();
          return true;
        },
        startControlApp: async () => {
          if (!control || control.running) return false;
          await control.start();
          return true;
        },
        exit,
      },
      adminPort,
    );
  } catch (e) {
    await control?.stop();
    throw e;
  }
  return {
    control,
    admin,
    close: async () => {
      await Promise.all([control?.stop(), admin.close()]);
    },
  };
}
