// The front a simulated engine's HTTP app puts before its routes (the SGLang server, the TokenSpeed
// control app): every call is recorded and counted, then route faults apply (delay, exit, drop,
// hang, canned answer, or the real handler told to claim success), then the key check, then the
// route table; a handler that throws answers 500 and never takes the process down. The routes,
// the key rule and the error bodies are the app's; this file owns the order.

import type { ServerResponse } from 'node:http';
import type { Holds } from './holds.ts';
import type { Concurrency, RequestLog } from './recorder.ts';
import type { Call, Handler } from './reply.ts';
import { routeMatch, type RouteFault, type RouteRule } from './route-faults.ts';

export interface FrontRoute<E> {
  methods: ReadonlySet<string>;
  handler: Handler<E>;
  /** Data-plane routes are left out of the control-concurrency counter. */
  dataPlane?: boolean;
}

/** An app's routes, added one per line so that the table reads as the app's route list. */
export class RouteTable<E> extends Map<string, FrontRoute<E>> {
  add(path: string, methods: readonly string[], handler: Handler<E>, dataPlane = false): void {
    this.set(path, { methods: new Set(methods), handler, dataPlane });
  }
}

/** The app's own answers for calls that never reach a handler, or whose handler threw. */
export interface FrontAnswers {
  unauthorized(res: ServerResponse): void;
  notFound(res: ServerResponse): void;
  methodNotAllowed(res: ServerResponse): void;
  internal(res: ServerResponse, message: string): void;
}

export interface FrontOptions<E> {
  engine: E;
  routes: ReadonlyMap<string, FrontRoute<E>>;
  log: RequestLog;
  concurrency: Concurrency;
  holds: Holds;
  faults: { take(matches: (fault: RouteFault) => boolean): RouteRule | null };
  /** False when the call lacks the key its route needs. */
  authorized(call: Call): boolean;
  answers: FrontAnswers;
  /** What an `exit` fault calls. */
  exit(code: number): void;
}

export class HttpFront<E> {
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(private readonly o: FrontOptions<E>) {}

  handle(call: Call): void {
    const { o } = this;
    const { req, res } = call;
    o.log.record(req, call.method, call.path, call.query, call.body);
    const route = o.routes.get(call.path);
    const leave = o.concurrency.enter(!route?.dataPlane);
    res.on('close', leave);
    const rule = o.faults.take(routeMatch(call.method, call.path));
    if (rule) {
      this.applyFault(rule, route, call).catch(() => res.destroy());
      return;
    }
    this.run(route, call);
  }

  /** Forgets the calls sleeping in a delay (the server is closing). */
  clearTimers(): void {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
  }

  private run(route: FrontRoute<E> | undefined, call: Call): void {
    const { answers } = this.o;
    const { res } = call;
    if (!this.o.authorized(call)) return answers.unauthorized(res);
    if (!route) return answers.notFound(res);
    if (!route.methods.has(call.method)) return answers.methodNotAllowed(res);
    const fail = (e: unknown): void => {
      if (res.headersSent) res.destroy();
      else answers.internal(res, (e as Error)?.message ?? String(e));
    };
    try {
      const r = route.handler(this.o.engine, call);
      if (r) r.catch(fail);
    } catch (e) {
      fail(e);
    }
  }

  private async applyFault(rule: RouteRule, route: FrontRoute<E> | undefined, call: Call): Promise<void> {
    const f = rule.fault;
    const { req, res } = call;
    const holds = this.o.holds;
    if (f.delayMs) {
      holds.delayed++;
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          this.timers.delete(t);
          resolve();
        }, f.delayMs);
        this.timers.add(t);
      });
      holds.delayed--;
      if (res.destroyed && !f.runIfAbandoned) return;
    }
    if (f.exit !== undefined && f.exit !== false) return this.o.exit(f.exit === true ? 1 : f.exit);
    if (f.drop) {
      req.socket.destroy();
      return;
    }
    if (f.hang) {
      const end = (): void => {
        holds.hung.delete(end);
        res.destroy();
      };
      holds.hung.add(end);
      res.on('close', () => holds.hung.delete(end));
      return;
    }
    if (rule.canned) {
      res.writeHead(rule.canned.status, rule.canned.headers);
      res.end(rule.canned.body);
      return;
    }
    this.run(route, { ...call, claimSuccess: f.claimSuccessWithoutApplying === true });
  }
}
