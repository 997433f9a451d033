// What the relay reads while it relays one request: four settings, the engine's load and breaker
// outcome, its version and two counters. No more, so the relay depends on neither the HTTP app
// nor the gateway that builds its services; the route plugins hand it their own services
// (http/services.ts), which hold all of these.

import type { GatewayConfig } from '../config/gateway-config.ts';
import type { EngineHost } from '../fleet/engine-host.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import type { Metrics } from '../obs/metrics.ts';

export interface RelayServices {
  config: Pick<GatewayConfig, 'requestTimeoutSecs' | 'synthesizeLogprobs' | 'tokenizerPath'> & { rl: Pick<GatewayConfig['rl'], 'enabled'> };
  /** Each attempt's load, and its outcome for the breaker. */
  host: Pick<EngineHost, 'acquire' | 'release'>;
  /** The engine's version, for the stamps. */
  view: Pick<FleetView, 'engine'>;
  metrics: Pick<Metrics, 'request' | 'mixedVersion'>;
}
