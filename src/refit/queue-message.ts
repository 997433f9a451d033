// One queued refit: the message a gateway publishes on `<root>.refit.submit` once it accepted a
// refit (service.ts), and that whichever replica takes it runs (runner.ts). It holds what the
// accepting replica resolved, so the runner never evaluates the selector again. A shape only:
// reading one from the queue, and refusing what is not one, is queue-verdict.ts's.

import type { RefitRequest } from './request.ts';
import type { SkippedEngine } from './targets.ts';

export interface QueuedRefit {
  id: string;
  request: RefitRequest;
  selector: string | null;
  /** Worker ids selected when the refit was accepted, and able to take part. */
  targets: string[];
  /** Selected engines left out, with the reason (targets.ts). */
  skipped: SkippedEngine[];
  origin: string;
  submitted_at: string;
}
