// Runs the control commands the engine actors emit: `command.run` executes one control call (path
// rules, control URL, the call, its metrics, what a 2xx tells sibling DP ranks) and answers with
// `cmd.result`; `command.abort` aborts it; `command.done` settles the caller of `EngineHost.run()`.
// It never orders, queues or retries commands (the actor does) and never creates or removes actors.

import { randomUUID } from 'node:crypto';
import type { CommandResult, EngineActor, EngineCommand } from '../../actors/engine.ts';
import { decodeBody, type ControlCall, type ControlOutcome } from '../engines/control-call.ts';
import type { ControlClient } from '../engines/control-client.ts';
import { controlOp, validateEnginePath } from '../control/engine-path.ts';
import { noControlEndpoint } from '../control/outcome.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import { controlUrlFor } from './control-url.ts';
import { observeControlCall } from './observe.ts';
import type { Registry } from './registry.ts';
import { mergedLabels } from './worker.ts';

const REFIT_PATHS = new Set([
  'update_weights_from_disk',
  'update_weights_from_tensor',
  'update_weights_from_distributed',
  'update_weights_from_ipc',
  'init_weights_update_group',
  'destroy_weights_update_group',
]);

/** Commands that stop generation: the engine leaves routing when they are sent (spec §12.6 paths). */
const PAUSE_PATHS = new Set(['pause_generation', 'pause', 'release_memory_occupation', 'sleep']);

/** What the runner uses of one hosted engine: its actor and the bookkeeping of its commands. */
export interface CommandLane {
  actor: EngineActor;
  /** Tokens of commands sent to this actor and not answered yet. */
  pending: Set<string>;
  /** Control calls in flight, by command token: aborted when the engine is removed. */
  running: Map<string, AbortController>;
}

export class CommandRunner {
  private readonly waiters = new Map<string, (r: CommandResult | { error: string }) => void>();

  constructor(
    private readonly deps: {
      registry: Registry;
      control: ControlClient;
      metrics: Metrics;
      log: Logger;
      /** The hosted actor of a worker, to tell sibling DP ranks what a call implied. */
      actorOf: (id: string) => EngineActor | undefined;
    },
  ) {}

  /** Enqueues one control call on the engine's actor; aborting `signal` becomes `cmd.cancel`. */
  submit(lane: CommandLane, call: ControlCall, signal?: AbortSignal): Promise<ControlOutcome> {
    if (signal?.aborted) return Promise.reject(new Error('cancelled'));
    const token = randomUUID();
    const op = REFIT_PATHS.has(call.path) ? 'refit' : PAUSE_PATHS.has(call.path) ? 'pause' : 'other';
    const command: EngineCommand = { token, op, payload: call };
    return new Promise((resolve, reject) => {
      const onAbort = () => lane.actor.send({ type: 'cmd.cancel', token });
      signal?.addEventListener('abort', onAbort, { once: true });
      lane.pending.add(token);
      this.waiters.set(token, (r) => {
        lane.pending.delete(token);
        signal?.removeEventListener('abort', onAbort);
        if ('error' in r) reject(new Error(r.error));
        else resolve(r.outcome as ControlOutcome);
      });
      lane.actor.send({ type: 'cmd.enqueue', command });
    });
  }

  /** Takes the commands the actor emits: the machine says what runs when, the I/O happens here. */
  listen(id: string, lane: CommandLane): void {
    const { actor, running } = lane;
    actor.on('command.run', ({ command }) => {
      const ctrl = new AbortController();
      running.set(command.token, ctrl);
      this.execute(id, command.payload as ControlCall, ctrl.signal).then(
        (result) => {
          running.delete(command.token);
          actor.send({ type: 'cmd.result', token: command.token, result });
        },
        (err: unknown) => {
          running.delete(command.token);
          actor.send({ type: 'cmd.result', token: command.token, result: { error: String((err as Error)?.message ?? err) } });
        },
      );
    });
    actor.on('command.abort', ({ token }) => running.get(token)?.abort());
    actor.on('command.done', ({ token, result }) => {
      const waiter = this.waiters.get(token);
      this.waiters.delete(token);
      waiter?.(result);
    });
  }

  /** The engine was removed: its running calls abort, and its waiters get an answer now, not at their deadline. */
  abandon(id: string, lane: CommandLane): void {
    for (const ctrl of lane.running.values()) ctrl.abort();
    for (const token of [...lane.pending]) {
      const waiter = this.waiters.get(token);
      this.waiters.delete(token);
      waiter?.({ error: `worker \`${id}\` was removed` });
    }
  }

  private async execute(id: string, call: ControlCall, signal: AbortSignal): Promise<CommandResult> {
    const worker = this.deps.registry.get(id);
    if (!worker) return { outcome: { kind: 'unreachable', latencyMs: 0, message: `worker \`${id}\` was removed` } };
    // Commands reach this replica over NATS from anyone on the bus: the path rules hold here too.
    try {
      validateEnginePath(call.path);
    } catch (err) {
      return { outcome: { kind: 'unreachable', latencyMs: 0, message: (err as Error).message } };
    }
    const controlUrl = controlUrlFor(worker.connectionMode, worker.baseUrl, mergedLabels(worker));
    if (!controlUrl) {
      const outcome: ControlOutcome = { kind: 'no_control_endpoint', latencyMs: 0, message: noControlEndpoint(worker), connectionMode: worker.connectionMode };
      return { outcome };
    }
    const clientError = this.deps.control.clientError(worker.httpPool);
    if (clientError) {
      const message = `worker \`${worker.id}\` has no control endpoint: no HTTP client for the control endpoint: ${clientError}`;
      return { outcome: { kind: 'no_control_endpoint', latencyMs: 0, message, connectionMode: worker.connectionMode } };
    }
    const outcome = await this.deps.control.call({ workerUrl: worker.url, controlUrl, apiKey: worker.apiKey, pool: worker.httpPool }, call, signal);
    this.deps.metrics.controlCall(controlOp(call.path), outcome);
    if (outcome.kind !== 'answer' || outcome.status < 200 || outcome.status >= 300) return { outcome };
    const seen = observeControlCall(call.path, decodeBody(call.body));
    // Rejections are logged with their reason, never with the value (spec §12.6).
    if (seen.rejected) this.deps.log.info({ worker_id: id, path: call.path, reason: seen.rejected }, 'rl.observe rejected');
    if (seen.version !== undefined) this.deps.log.info({ worker: worker.baseUrl, version: seen.version, source: 'passthrough' }, 'rl.observe version');
    if (seen.control !== undefined) this.deps.log.info({ worker: worker.baseUrl, control: seen.control, source: 'passthrough' }, 'rl.observe control');
    // DP ranks share one engine: their actors learn the same facts.
    for (const sib of this.deps.registry.siblings(worker.baseUrl)) {
      if (sib.id === id) continue;
      if (seen.version !== undefined) this.setVersionOne(sib.id, seen.version);
      if (seen.control !== undefined) this.deps.actorOf(sib.id)?.send({ type: 'control.set', control: seen.control });
    }
    return { outcome, control: seen.control, version: seen.version };
  }

  private setVersionOne(id: string, version: string): void {
    this.deps.actorOf(id)?.send({ type: 'version.set', version, source: 'passthrough' });
  }
}
