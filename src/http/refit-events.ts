// GET /v1/rl/refits/{id}/events: one refit's progress as server-sent events, replayed from its
// first event (or after `Last-Event-ID`) out of the refit events stream, then live, ending after
// the `report` event. Any replica answers it, whichever replica runs the refit.

import type { FastifyPluginAsync } from 'fastify';
import { Type } from '@sinclair/typebox';
import { ErrorAnswer } from '../api/error-schema.ts';
import type { RouteOptions } from './services.ts';
import { lastEventId, openSse } from './sse.ts';

/** How long the stream may be quiet before the journal is asked whether the refit is over. */
const QUIET_MS = 1_000;

export const refitEventRoutes: FastifyPluginAsync<RouteOptions> = async (app, { services }) => {
  const { refits, refitEvents, log } = services;

  app.get<{ Params: { id: string } }>(
    '/refits/:id/events',
    {
      schema: {
        tags: ['refits'],
        summary: "A refit's progress as server-sent events",
        description:
          "Replays the refit's events from its start (or after `Last-Event-ID`), then follows it live, and ends after the `report` event. " +
          'Events: `accepted`, `started`, `phase`, `leg`, `takeover`, `report`; each `data` is one JSON object with `refit_id`, `type` and `time`.',
        params: Type.Object({ id: Type.String({ description: 'The refit id.' }) }),
        headers: Type.Object({ 'last-event-id': Type.Optional(Type.String({ description: 'Resume after this event id.' })) }),
        response: {
          200: Type.String({ description: 'text/event-stream' }),
          404: ErrorAnswer,
        },
      },
    },
    async (req, reply) => {
      const id = req.params.id;
      // 404 refit_not_found before the stream opens, unless the stream already holds the refit's
      // `accepted` (queued on another replica, no runner has taken it yet).
      await refits.get(id).catch(async (err: unknown) => {
        if (!(await refitEvents.has(id))) throw err;
      });
      const sse = openSse(req, reply);
      const stop = new AbortController();
      sse.closed.addEventListener('abort', () => stop.abort(), { once: true });
      let quietSince = Date.now();
      const finish = (report: unknown, seq?: number) => {
        sse.send('report', report, seq);
        sse.end();
        stop.abort();
      };
      refitEvents
        .follow(
          id,
          lastEventId(req),
          ({ seq, event }) => {
            quietSince = Date.now();
            if (event.type === 'report') return finish(event, seq);
            sse.send(String(event.type ?? 'message'), event, seq);
          },
          stop.signal,
        )
        .catch((err: unknown) => log.warn({ err, refit_id: id }, 'could not follow the refit events stream; the report still comes from the journal'));
      // The report is also in the journal: a stream that lost it (a NATS node died while it was
      // published) still ends with it.
      const check = setInterval(() => {
        if (Date.now() - quietSince < QUIET_MS) return;
        void refits.get(id).then(
          (now) => {
            if (!stop.signal.aborted && now.status !== 'running' && now.status !== 'queued')
              finish({ refit_id: id, type: 'report', time: new Date().toISOString(), report: now });
          },
          () => {},
        );
      }, QUIET_MS);
      stop.signal.addEventListener('abort', () => clearInterval(check), { once: true });
      return reply;
    },
  );
};
