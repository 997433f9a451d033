// What route plugins are handed: the gateway's services, built once by gateway/gateway.ts.
// Route files take what they need from here and never construct services themselves.

import type { GatewayConfig } from '../config/gateway-config.ts';
import type { Logger } from '../obs/logger.ts';
import type { Metrics } from '../obs/metrics.ts';
import type { Registry } from '../fleet/registry.ts';
import type { FleetView } from '../fleet/fleet-view.ts';
import type { EngineHost } from '../fleet/engine-host.ts';
import type { Passthrough } from '../control/passthrough.ts';
import type { RefitService } from '../refit/service.ts';
import type { Router } from '../fleet/router.ts';
import type { Bus } from '../bus/connection.ts';
import type { RefitEventLog } from '../bus/refit-events.ts';
import type { FleetFeed } from '../fleet/fleet-feed.ts';
import type { LeaseFence } from '../fleet/lease-fence.ts';
import type { StaleGuard } from '../relay/stale-guard.ts';

export interface Services {
  config: GatewayConfig;
  log: Logger;
  metrics: Metrics;
  registry: Registry;
  view: FleetView;
  host: EngineHost;
  passthrough: Passthrough;
  refits: RefitService;
  /** The refits' kept progress events (GET /v1/rl/refits/{id}/events). */
  refitEvents: RefitEventLog;
  /** Engine changes and refit events while someone watches (GET /v1/rl/events). */
  feed: FleetFeed;
  router: Router;
  /** The staleness bound on /generate requests in flight (relay/stale-guard.ts). */
  stale: StaleGuard;
  /** Only whether NATS is connected (GET /health); routes never use the bus directly. */
  bus: Pick<Bus, 'connected'>;
  /** Whether this replica may command engines (GET /health): closed when its lease is not confirmed. */
  fence: Pick<LeaseFence, 'reason'>;
}

export interface RouteOptions {
  services: Services;
}
