// A refit's progress on the bus: each event on `<root>.refit.<id>.events` (kept by the refit
// events stream, so GET /v1/rl/refits/{id}/events replays a refit from its start), and the final
// report once on `<root>.refit.<id>.report`. Publishing is best effort: a failure is logged and
// never thrown, since the journal holds the authoritative report. It never reads the stream
// (bus/refit-events.ts does) and never shapes an event beyond its id and time.

import type { Bus } from '../bus/connection.ts';
import type { Subjects } from '../bus/subjects.ts';
import type { Logger } from '../obs/logger.ts';
import type { RefitEvent, RefitEventBody } from '../wire/refit-event.ts';
import type { RefitReport } from '../wire/refit-report.ts';

export class RefitPublisher {
  /** Waves of rolling refits run here: wave refit id → its parent and index (rolling.ts). */
  private readonly forwards = new Map<string, { parent: string; wave: number }>();

  constructor(private readonly deps: { bus: Bus; subjects: Subjects; log: Logger }) {}

  /** One progress event of a refit (refit-events contract: docs/refit-events.md); a wave's is sent on its parent's stream too. */
  publish(id: string, event: RefitEventBody): void {
    const time = new Date().toISOString();
    this.send(id, { refit_id: id, time, ...event } satisfies RefitEvent);
    const to = this.forwards.get(id);
    // A wave's report is not the parent's: the parent's stream gets the `wave` event that says how it ended.
    if (to && event.type !== 'report') this.send(to.parent, { refit_id: to.parent, time, ...event, wave: to.wave, wave_refit_id: id } satisfies RefitEvent);
  }

  /** From now on, refit `waveId`'s events also go to its parent's stream, marked with the wave. */
  forward(waveId: string, parent: string, wave: number): void {
    this.forwards.set(waveId, { parent, wave });
  }

  unforward(waveId: string): void {
    this.forwards.delete(waveId);
  }

  private send(id: string, event: RefitEvent): void {
    try {
      this.deps.bus.publish(this.deps.subjects.refitEvents(id), event);
    } catch (err) {
      this.deps.log.warn({ err, refit_id: id }, 'could not publish refit event');
    }
  }

  /** The report: the refit's last event, then on its own subject (after it is in the journal). */
  report(report: RefitReport): void {
    this.publish(report.id, { type: 'report', report });
    try {
      this.deps.bus.publish(this.deps.subjects.refitReport(report.id), report);
    } catch (err) {
      this.deps.log.warn({ err, refit_id: report.id }, 'could not publish the refit report (it is in the journal)');
    }
  }
}
