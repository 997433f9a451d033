// A replica's way onto NATS: the servers it was given, or an embedded nats-server of its own when
// it was given none (the single-node default). What the connection does after that is the bus's.

import type { GatewayConfig } from '../config/gateway-config.ts';
import { connectBus, type Bus } from '../bus/connection.ts';
import { natsConnectOptions } from '../bus/connect-options.ts';
import { startEmbeddedNats } from '../bus/server.ts';
import { BODY_CAP } from '../engines/control-call.ts';
import type { Logger } from '../obs/logger.ts';
import { logBusStatus, logNatsServerEvent } from './bus-events.ts';

export interface JoinedBus {
  bus: Bus;
  /** The server(s) joined, credentials included: mask before logging (redactUrl). */
  natsUrl: string;
  /** The server's max_payload (0 where it says none). */
  maxPayload: number;
}

/** Joins (or embeds) NATS; what it starts is pushed onto `cleanups`, to be stopped in reverse. */
export async function joinBus(config: GatewayConfig, replicaId: string, log: Logger, cleanups: Array<() => Promise<void> | void>): Promise<JoinedBus> {
  let natsUrl = config.natsUrl;
  if (!natsUrl) {
    const embedded = await startEmbeddedNats({ log: (line) => log.debug({ component: 'nats-server' }, line), onEvent: logNatsServerEvent(log) });
    cleanups.push(() => embedded.stop());
    natsUrl = embedded.url;
    log.info({ nats_url: natsUrl, nats_pid: embedded.pid }, 'embedded nats-server started');
  }
  const bus = await connectBus({
    ...natsConnectOptions(natsUrl, config.nats),
    name: `rlgate-gateway-${replicaId}`,
    pingIntervalMs: config.natsPingIntervalSecs * 1000,
    onHandlerError: (err, subject) => log.warn({ err, subject }, 'bus handler failed'),
  });
  cleanups.push(() => bus.close());
  cleanups.push(logBusStatus(bus, log));
  const maxPayload = bus.nc.info?.max_payload ?? 0;
  if (maxPayload > 0 && maxPayload < 2 * BODY_CAP) {
    log.warn(
      { max_payload: maxPayload },
      'the NATS server max_payload is below 2 MiB: engine answers near the 1 MiB body cap cannot cross the bus; set max_payload to 8MB',
    );
  }
  return { bus, natsUrl, maxPayload };
}
