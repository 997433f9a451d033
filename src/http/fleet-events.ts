// GET /v1/rl/events: the whole fleet as server-sent events — a `snapshot` (the rows of
// GET /v1/rl/workers and the refits of GET /v1/rl/refits), then each engine's change (`engine`)
// and every refit's progress (`refit`), for the web page and other live views.

import type { FastifyPluginAsync } from 'fastify';
import { Type } from '@sinclair/typebox';
import { ErrorAnswer } from '../api/error-schema.ts';
import type { FeedItem } from '../fleet/fleet-feed.ts';
import type { RouteOptions } from './services.ts';
import { openSse } from './sse.ts';

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
          'each time an engine changes, and a `refit` event for every progress event of every refit.',
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
      sse.send('snapshot', { workers: view.rows(), refits: list });
      for (const item of held) send(item);
      held = undefined;
      return reply;
    },
  );
};
