// Feeds the KV-event index (kv-index.ts) from the engines themselves: one SubscribeKvEvents stream
// per registered gRPC worker, from this replica whoever owns the worker's actor (every replica
// routes, each with its own index). A stream follows its worker: opened when it is registered,
// reopened (resuming after the last batch applied) when it drops, closed when the worker is
// removed or the gateway stops. An engine that answers UNIMPLEMENTED streams nothing: it is asked
// again only when it is registered anew. It never reads a batch itself: the index does.

import { GrpcEngineClient } from '../engines/grpc.ts';
import { KvSubscription, type KvStreamEnd } from '../engines/kv-events.ts';
import type { Logger } from '../obs/logger.ts';
import type { KvIndex } from './kv-index.ts';
import type { Registry } from './registry.ts';
import type { Worker } from './worker.ts';

interface Stream {
  url: string;
  /** A client of the stream's own: grpc-js shares the connection with the data plane's. */
  client: GrpcEngineClient;
  sub: KvSubscription;
}

export interface KvFeedDeps {
  registry: Registry;
  index: KvIndex;
  log: Logger;
}

export class KvFeed {
  private readonly streams = new Map<string, Stream>();
  private readonly listeners: Array<() => void> = [];
  private closed = false;

  constructor(private readonly deps: KvFeedDeps) {
    const { registry } = deps;
    const on = <E extends 'added' | 'replaced' | 'removed'>(event: E, fn: (...args: never[]) => void) => {
      registry.on(event, fn as never);
      this.listeners.push(() => registry.off(event, fn as never));
    };
    on('added', (w: Worker) => this.follow(w));
    // A re-registration asks again an engine that refused, and a new URL needs a new stream.
    on('replaced', (_prev: Worker, next: Worker) => this.follow(next));
    on('removed', (w: Worker) => this.drop(w.id));
    for (const w of registry.all()) this.follow(w);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const off of this.listeners.splice(0)) off();
    await Promise.all([...this.streams.keys()].map((id) => this.end(id)));
  }

  private follow(w: Worker): void {
    if (this.closed) return;
    const s = this.streams.get(w.id);
    if (w.connectionMode !== 'grpc') {
      if (s) this.drop(w.id);
      return;
    }
    if (s && s.url === w.url && s.sub.active) return;
    if (s) void this.end(w.id);
    this.open(w);
  }

  private open(w: Worker): void {
    const { index } = this.deps;
    const id = w.id;
    const client = new GrpcEngineClient(w.url);
    const dpRank = w.dpAware && w.dpRank !== null ? w.dpRank : undefined;
    const sub = new KvSubscription({
      source: client,
      resumeAfter: () => index.resumeAfter(id),
      batch: (b) => index.apply(id, b, dpRank),
      lost: (end) => this.lost(w, end),
    });
    this.streams.set(id, { url: w.url, client, sub });
  }

  private lost(w: Worker, end: KvStreamEnd): void {
    const { index, log } = this.deps;
    if (end.kind === 'unimplemented') {
      // Nothing to index; the approximate tree routes for it. The closed subscription stays
      // listed (its channel closed), so only a re-registration asks again.
      index.forget(w.id);
      void this.streams.get(w.id)?.client.close();
      log.info({ worker: w.url }, 'the engine streams no KV events (SubscribeKvEvents is UNIMPLEMENTED); routing for it uses the approximate tree');
      return;
    }
    index.streamLost(w.id);
    log.debug({ worker: w.url, reason: end.detail }, 'KV event stream lost; reopening');
  }

  private drop(id: string): void {
    void this.end(id);
    this.deps.index.forget(id);
  }

  private async end(id: string): Promise<void> {
    const s = this.streams.get(id);
    if (!s) return;
    this.streams.delete(id);
    s.sub.close();
    await s.client.close();
  }
}
