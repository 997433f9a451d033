// `rlgate sim zmq` and `node --import tsx sim/zmq/main.ts`: parse flags, start the simulator
// with the TCP broadcast transport, print one `listening` JSON line, and stop cleanly on
// SIGTERM/SIGINT (or stdin EOF with --exit-on-stdin-close). No engine behaviour of its own.

import { joinGroup } from '../broadcast/member.ts';
import { runAsMain, runUntilStopped } from '../core/lifetime.ts';
import { HELP, parseArgs } from './options.ts';
import { startZmqSim } from './server.ts';

/**
 * Runs one simulator until a signal (or an `exit` fault / POST /_sim/exit, which exit the process
 * with their code). Resolves after a clean stop; throws on bad flags.
 */
export async function zmqSimCommand(argv: string[]): Promise<void> {
  const cli = parseArgs(argv);
  if (cli.help) {
    process.stdout.write(HELP);
    return;
  }
  // A simulated crash: no cleanup, the sockets just go away.
  const sim = await startZmqSim({ ...cli.options, joinGroup, onExit: (code) => process.exit(code) });
  process.stdout.write(
    `${JSON.stringify({
      event: 'listening',
      url: sim.url,
      handshake: sim.handshakeAddress,
      control_url: sim.controlUrl,
      admin_url: sim.adminUrl,
      port: sim.port,
    })}\n`,
  );
  await runUntilStopped(() => sim.close(), cli.exitOnStdinClose);
}

runAsMain(import.meta.url, 'zmq-sim', zmqSimCommand);
