// One refit on the durable queue (`<root>.refit.submit`, `Nats-Msg-Id` the refit id): what the
// replica that accepted it resolved, for whichever replica runs it. Shapes only:
// src/refit/service.ts queues it, src/refit/queue-verdict.ts checks it again when it is taken.

import type { RefitRequest } from './refit-request.ts';
import type { SkippedEngine } from './refit-report.ts';

export interface QueuedRefit {
  id: string;
  request: RefitRequest;
  selector: string | null;
  /** Worker ids selected when the refit was accepted, and able to take part. */
  targets: string[];
  /** Selected engines left out, with the reason. */
  skipped: SkippedEngine[];
  origin: string;
  submitted_at: string;
  /** A wave of a rolling refit: the parent's id (the parent holds these engines; the wave may take them). */
  parent?: string;
}
