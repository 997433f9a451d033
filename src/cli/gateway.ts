// `rlgate gateway`: one gateway replica in the foreground until SIGINT/SIGTERM (or its parent's
// death: see stop-signals.ts), then a clean shutdown within --shutdown-timeout-secs (the embedded
// nats-server, if any, goes with it); past that deadline, or on a second signal, it exits anyway.
// With several processes (`--processes` above 1, or `auto`) this process supervises them
// (gateway/processes.ts) and each of them runs the replica below.

import { ConfigError, helpText, loadConfig } from '../gateway/config.ts';
import { isGatewayProcess, processConfig, processCount, reportListening, superviseProcesses } from '../gateway/processes.ts';
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
  const timeoutSecs = config.shutdownTimeoutSecs;
  const onSecond = (signal: NodeJS.Signals) => log.warn({ signal }, 'second signal: exiting now');
  const count = isGatewayProcess() ? 1 : processCount(config);
  if (count > 1) {
    const sup = await superviseProcesses(config, count, log);
    process.stdout.write(
      `${JSON.stringify({ event: 'listening', url: sup.url, nats_url: sup.natsUrl, replica_id: sup.replicaIds[0], replica_ids: sup.replicaIds, processes: count })}\n`,
    );
    const why = await waitForStop({ onSecond });
    log.info({ reason: why, shutdown_timeout_secs: timeoutSecs }, 'shutting down');
    const late = () => log.error({ shutdown_timeout_secs: timeoutSecs }, 'shutdown did not finish in time; exiting anyway');
    exitAfter(timeoutSecs * 1000 + 2_000, late);
    // As one process does: past the deadline the rest is killed and the exit code is 1.
    if (!(await sup.close(timeoutSecs * 1000))) {
      late();
      process.exit(1);
    }
    log.info('gateway stopped');
    setTimeout(() => process.exit(process.exitCode ?? 0), LINGER_AFTER_CLOSE_MS).unref();
    return 0;
  }
  // Loaded only now: a usage error, --help and the supervisor of several processes never need the
  // gateway's code (fastify, NATS, the actors), which is most of a start-up's CPU.
  const { startGateway } = await import('../gateway/gateway.ts');
  const gw = await startGateway(processConfig(config), { log });
  if (isGatewayProcess()) {
    reportListening(gw.url, gw.replicaId);
    // A terminal's Ctrl-C reaches the whole process group: the supervisor alone decides, by SIGTERM.
    process.on('SIGINT', () => {});
  } else process.stdout.write(`${JSON.stringify({ event: 'listening', url: gw.url, nats_url: gw.natsUrl, replica_id: gw.replicaId })}\n`);
  const why = await waitForStop({ onSecond, signals: isGatewayProcess() ? ['SIGTERM'] : undefined });
  log.info({ reason: why, shutdown_timeout_secs: timeoutSecs }, 'shutting down');
  exitAfter(timeoutSecs * 1000, () => log.error({ shutdown_timeout_secs: timeoutSecs }, 'shutdown did not finish in time; exiting anyway'));
  await gw.close();
  log.info('gateway stopped');
  setTimeout(() => process.exit(process.exitCode ?? 0), LINGER_AFTER_CLOSE_MS).unref();
  return 0;
}
