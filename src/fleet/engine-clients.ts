// The data-plane side of every engine of the fleet, whoever owns its actor: one client per engine
// (for an HTTP engine, one control connection that discovery, probes and control calls share, and
// a data-plane pool opened by the first routed request) and its count of data-plane requests in flight from this replica. Rebuilt when what the client
// is built from changes (key, URL, a ZMQ engine's labels). Never runs commands, never holds state
// beyond the client and the count.

import type { EngineClient } from '../engines/engine-client.ts';
import { GrpcEngineClient } from '../engines/grpc.ts';
import { HttpEngineClient } from '../engines/http.ts';
import { ZmqEngineClient } from '../engines/zmq.ts';
import { baseUrlOf, mergedLabels, UNKNOWN_MODEL_ID, type Worker } from './worker.ts';

/** One engine as the data plane reaches it. */
export interface EngineLink {
  url: string;
  client: EngineClient;
  /** Data-plane requests in flight from this replica; a plain counter, never an actor event (hot path). */
  load: number;
}

export class EngineClients {
  private readonly links = new Map<string, EngineLink>();

  has(id: string): boolean {
    return this.links.has(id);
  }

  get(id: string): EngineLink | undefined {
    return this.links.get(id);
  }

  ids(): IterableIterator<string> {
    return this.links.keys();
  }

  /** The engine's link, made on first sight. */
  add(worker: Worker): EngineLink {
    let link = this.links.get(worker.id);
    if (!link) this.links.set(worker.id, (link = { url: worker.url, client: clientFor(worker), load: 0 }));
    return link;
  }

  /** A registration changed: a new key, URL or ZMQ labels need a new client. */
  replace(prev: Worker, next: Worker): void {
    const link = this.links.get(next.id);
    if (!link) return;
    // A ZMQ client binds its lane from labels (handshake address) and names its model.
    const zmqChanged = next.connectionMode === 'zmq' && JSON.stringify(mergedLabels(prev)) !== JSON.stringify(mergedLabels(next));
    if (prev.apiKey !== next.apiKey || prev.url !== next.url || zmqChanged) {
      void link.client.close();
      link.client = clientFor(next);
      link.url = next.url;
    }
  }

  /** Forgets the engine and closes its client. */
  async remove(id: string): Promise<void> {
    const link = this.links.get(id);
    if (!link) return;
    this.links.delete(id);
    await link.client.close();
  }
}

function clientFor(worker: Worker): EngineClient {
  switch (worker.connectionMode) {
    case 'http':
      return new HttpEngineClient(baseUrlOf(worker.url).baseUrl, worker.apiKey);
    case 'grpc':
      return new GrpcEngineClient(worker.url);
    case 'zmq': {
      // The gateway binds the ZMQ lane and engines dial in; the handshake address can be pinned
      // with a registration label when the derived one does not suit the deployment.
      const labels = mergedLabels(worker);
      return new ZmqEngineClient(worker.url, {
        modelId: worker.modelId !== UNKNOWN_MODEL_ID ? worker.modelId : undefined,
        handshakeAddress: labels.zmq_handshake_address,
      });
    }
  }
}
