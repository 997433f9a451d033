// `rlgate sim tokenspeed` and `node --import tsx sim/tokenspeed/main.ts`: parse flags, pick
// the servicer personality (flag > env > default, invalid values fail startup), start the
// simulator with the TCP broadcast transport, print one `listening` JSON line, and stop cleanly
// on SIGTERM/SIGINT (or stdin EOF when asked). It holds no engine behaviour of its own.

import { joinGroup } from '../broadcast/member.ts';
import { runAsMain, runUntilStopped } from '../core/lifetime.ts';
import { HELP, parseArgs } from './cli.ts';
import { IMPL_ENV, implLogLine, resolveServicerImpl, ServicerImplError } from './profile.ts';
import { startTokenspeedSim } from './server.ts';

/**
 * Runs one simulator until SIGTERM/SIGINT (or an `exit` fault / POST /_sim/exit, which exit the
 * process with their code). Resolves after a clean stop; throws on bad flags (a
 * ServicerImplError carries the exit status: 2 for a bad flag, 1 for a bad environment value).
 */
export async function tokenspeedSimCommand(argv: string[]): Promise<void> {
  const cli = parseArgs(argv);
  if (cli.help) {
    process.stdout.write(HELP);
    return;
  }
  const { impl, source } = resolveServicerImpl(cli.servicerImplFlag, process.env);
  // Written back so anything this process spawns agrees on the choice, as the real package does.
  process.env[IMPL_ENV] = impl;
  process.stderr.write(`${implLogLine(impl, source)}\n`);
  const sim = await startTokenspeedSim({
    ...cli.options,
    servicerImpl: impl,
    servicerImplSource: source,
    joinGroup,
    // A simulated crash: no drain, the ports just stop answering.
    onExit: (code) => process.exit(code),
  });
  process.stdout.write(
    `${JSON.stringify({
      event: 'listening',
      url: sim.url,
      port: sim.port,
      control_url: sim.controlUrl,
      control_port: sim.controlPort,
      admin_url: sim.adminUrl,
      servicer_impl: impl,
      servicer_impl_source: source,
    })}\n`,
  );
  await runUntilStopped(() => sim.shutdown(), cli.exitOnStdinClose);
}

runAsMain(import.meta.url, 'tokenspeed-sim', tokenspeedSimCommand, (err) => (err instanceof ServicerImplError ? err.exitCode : 2));
