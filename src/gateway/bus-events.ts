// What the gateway logs about its bus: the NATS connection dropping and coming back, and the
// embedded nats-server dying and being started again. Logging only; the bus itself decides
// nothing here (connection.ts fails requests, server.ts restarts the server).

import type { Bus } from '../bus/connection.ts';
import type { NatsServerEvent } from '../bus/server.ts';
import type { Logger } from '../obs/logger.ts';

/** Logs every disconnect (warn) and reconnect (info) of `bus`; returns the unsubscribe. */
export function logBusStatus(bus: Bus, log: Logger): () => void {
  let lostAt = 0;
  return bus.onStatus((s) => {
    if (s.event === 'disconnect') {
      lostAt = Date.now();
      log.warn({ nats_server: s.server }, 'lost the NATS connection; reconnecting (control calls and refits answer bus_unavailable, /health is 503)');
    } else if (s.event === 'reconnect') {
      log.info({ nats_server: s.server, down_ms: lostAt ? Date.now() - lostAt : undefined }, 'NATS connection re-established');
    }
  });
}

/** The embedded server's supervision, as log lines. */
export function logNatsServerEvent(log: Logger): (e: NatsServerEvent) => void {
  return (e) => {
    switch (e.type) {
      case 'exited':
        log.warn(
          { nats_pid: e.pid, code: e.code, signal: e.signal, restart_in_ms: e.restartInMs },
          'embedded nats-server exited unexpectedly; restarting it on the same port and store',
        );
        break;
      case 'restarted':
        log.warn({ nats_pid: e.pid }, 'embedded nats-server restarted');
        break;
      case 'restart_failed':
        log.error({ err: e.error, retry_in_ms: e.retryInMs }, 'embedded nats-server could not be restarted; trying again');
        break;
    }
  };
}
