// Trainers on the bus: a refit request on `rl.refit.request` is answered by one replica (a queue
// group), as the HTTP front answers POST /v1/rl/refit: `dry_run` gets the plan, anything else
// runs and gets the report with the HTTP status it would have had.

import type { Bus, BusSubscription } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { RefitReply } from '../wire/refit-request.ts';
import { reportStatus } from './report.ts';
import type { RefitService } from './service.ts';

export function serveRefitRequests(bus: Bus, subjects: Subjects, refits: RefitService): BusSubscription {
  return bus.respond(
    subjects.refitRequest(),
    async (data) => {
      if ((data as { dry_run?: unknown } | null)?.dry_run === true) return { status: 200, plan: refits.plan(data) } satisfies RefitReply;
      const report = await refits.run(data, 'nats');
      return { status: reportStatus(report), report } satisfies RefitReply;
    },
    { queue: 'rlgate-refits' },
  );
}
