// `GET /health_generate` on one worker, as SMG's HTTP router answers it: an HTTP engine's own
// `/health_generate` (SGLang runs a one-token generation), its status and body passed back. A
// token engine has no such route: it is asked the liveness check of its wire that runs a
// generation (gRPC `HealthCheck`; the ZMQ lane's health), answered as SGLang answers, 200 or 503
// with no body. It never picks the worker (http/health-generate.ts does).

import type { EngineClient } from '../engines/engine-client.ts';
import { HttpEngineClient } from '../engines/http.ts';
import type { Worker } from '../fleet/worker.ts';
import type { Logger } from '../obs/logger.ts';
import { callHttpEngine, lightCallSecs, type EngineAnswer } from './engine-call.ts';
import type { RelayServices } from './relay-services.ts';

export async function healthGenerateOn(services: RelayServices & { log: Logger }, worker: Worker, client: EngineClient): Promise<EngineAnswer> {
  if (client instanceof HttpEngineClient) return callHttpEngine(services, worker, client, { method: 'GET', path: '/health_generate' });
  try {
    await client.probe(AbortSignal.timeout(lightCallSecs(services.config) * 1000));
    return { status: 200, headers: {}, body: Buffer.alloc(0) };
  } catch (err) {
    services.log.warn({ worker_id: worker.id, url: worker.url, err: (err as Error).message }, 'health_generate: the engine failed its health check');
    return { status: 503, headers: {}, body: Buffer.alloc(0) };
  }
}
