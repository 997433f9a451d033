// GET /v1/rl/events: the whole fleet as server-sent events — a `snapshot` (the rows of
// GET /v1/rl/workers and the refits of GET /v1/rl/refits), then each engine's change (`engine`),
// every refit's progress (`refit`) and, once a second, the load and routing figures of the
// engines whose figures moved (`routing`), for the web page and other live views.

import type { FastifyPluginAsync } from 'fastify';
import { Type } from '@sinclair/typebox';
import { ErrorAnswer } from '../api/error-schema.ts';
import type { FeedItem } from '../fleet/fleet-feed.ts';
import type { RouteOptions } from './services.ts';
import { openSse } from './sse.ts';

// Load and routing figures move with every request: sent on a clock, not per change, so a busy
// fleet costs a watcher one event per engine a second at most.
const ROUTING_REFRESH_MS = 1_000;

/** What a `routing` event says of an engine, as a string to compare with the last one sent. */
const figuresKey = (u: { load: number; routing: unknown }) => `${u.load}|${JSON.stringify(u.routing)}`;

export const fleetEventRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { view, refits, feed } = services;

  app.get(
    '/events',
    {
      schema: {
        tags: ['workers'],
        summary: 'The fleet and its refits, live, as server-sent events',
        description:
          'First a `snapshot` event (`{workers, refits}`, as GET /v1/rl/workers and GET /v1/rl/refits answer), then an `engine` event (one worker row, or `{id, removed: true}`) ' +
          'each time an engine changes, a `refit` event for every progress event of every refit, and every second a `routing` event (`{id, load, routing}`, as in the rows) ' +
          'for each engine whose load or routing figures changed since the stream last showed them.',
        response: {
          200: Type.String({ description: 'text/event-stream' }),
          401: ErrorAnswer,
        },
      },
    },
    async (req, reply) => {
      const sse = openSse(req, reply);
      // Changes that come while the snapshot is read are sent after it, not lost.
      let held: FeedItem[] | undefined = [];
      const send = (item: FeedItem) => {
        if (item.kind === 'engine') sse.send('engine', item.row);
        else if (item.kind === 'removed') sse.send('engine', { id: item.id, removed: true });
        else sse.send('refit', item.event);
      };
      const unlisten = feed.listen((item) => (held ? held.push(item) : send(item)));
      sse.closed.addEventListener('abort', unlisten, { once: true });
      const list = await refits.list();
      const workers = view.rows();
      sse.send('snapshot', { workers, refits: list });
      for (const item of held) send(item);
      held = undefined;
      // The caller may have gone while the refits were read: no clock for a closed stream.
      if (sse.closed.aborted) return reply;
      let shown = new Map(workers.map((w) => [w.id, figuresKey(w)]));
      const refresh = setInterval(() => {
        const now = new Map<string, string>();
        for (const u of view.usage()) {
          const key = figuresKey(u);
          now.set(u.id, key);
          if (shown.get(u.id) !== key) sse.send('routing', u);
        }
        shown = now;
      }, ROUTING_REFRESH_MS);
      sse.closed.addEventListener('abort', () => clearInterval(refresh), { once: true });
      return reply;
    },
  );
};
