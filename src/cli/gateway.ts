// `rlgate gateway`: one gateway replica in the foreground until SIGINT/SIGTERM (or its parent's
// death: see stop-signals.ts), then a clean shutdown within --shutdown-timeout-secs (the embedded
// nats-server, if any, goes with it); past that deadline, or on a second signal, it exits anyway.

import { ConfigError, helpText, loadConfig } from '../gateway/config.ts';
import { startGateway } from '../gateway/gateway.ts';
import { createLogger } from '../obs/logger.ts';
import { exitAfter, waitForStop } from './stop-signals.ts';

// After a complete close nothing should hold the event loop; if something still does, it is not
// worth keeping the process for.
const LINGER_AFTER_CLOSE_MS = 1_000;

export async function gatewayCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  let config;
  try {
    config = loadConfig(argv);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`rlgate gateway: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const log = createLogger({ level: config.logLevel });
  // Any user of the machine can read a process's arguments (ps, /proc/<pid>/cmdline).
  for (const [flag, env] of [
    ['--admin-key', 'RLGATE_ADMIN_KEY'],
    ['--registration-key', 'RLGATE_REGISTRATION_KEY'],
  ] as const) {
    if (argv.some((a) => a === flag || a.startsWith(`${flag}=`))) {
      log.warn(
        `${flag} on the command line is visible to other users of this machine (ps, /proc/<pid>/cmdline); pass it with ${flag}-file or the environment variable ${env}`,
      );
    }
  }
  const gw = await startGateway(config, { log });
  process.stdout.write(`${JSON.stringify({ event: 'listening', url: gw.url, nats_url: gw.natsUrl, replica_id: gw.replicaId })}\n`);
  const why = await waitForStop({ onSecond: (signal) => log.warn({ signal }, 'second signal: exiting now') });
  const timeoutSecs = config.shutdownTimeoutSecs;
  log.info({ reason: why, shutdown_timeout_secs: timeoutSecs }, 'shutting down');
  exitAfter(timeoutSecs * 1000, () => log.error({ shutdown_timeout_secs: timeoutSecs }, 'shutdown did not finish in time; exiting anyway'));
  await gw.close();
  log.info('gateway stopped');
  setTimeout(() => process.exit(process.exitCode ?? 0), LINGER_AFTER_CLOSE_MS).unref();
  return 0;
}
