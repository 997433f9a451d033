// `rlgate sim sglang` and `node --import tsx sim/sglang/main.ts`: parse flags, pick the
// broadcast transport (sim/broadcast/member.ts when it loads, else metadata only), start the
// simulator, print one `listening` JSON line, and stop cleanly on SIGTERM/SIGINT. It holds no
// engine behaviour of its own.

import type { JoinGroup } from '../broadcast/types.ts';
import { runAsMain, runUntilStopped } from '../core/lifetime.ts';
import { HELP, parseArgs, type Transport } from './options.ts';
import { startSglangSim } from './server.ts';

/** The TCP broadcast transport, when its module is present and loads; null otherwise. */
async function loadTransport(transport: Transport): Promise<JoinGroup | null> {
  if (transport === 'metadata') return null;
  // A non-literal specifier: the broadcast module is optional for this simulator and may be absent.
  // Relative, so the build's import rewriting (rewriteRelativeImportExtensions) makes it `.js` in dist/.
  const specifier: string = '../broadcast/member.ts';
  try {
    const mod = (await import(specifier)) as { joinGroup?: JoinGroup };
    return typeof mod.joinGroup === 'function' ? mod.joinGroup : null;
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code !== 'ERR_MODULE_NOT_FOUND') {
      process.stderr.write(`sglang-sim: broadcast transport failed to load (${(e as Error).message}); NCCL routes run metadata-only\n`);
    }
    return null;
  }
}

/**
 * Runs one simulator until SIGTERM/SIGINT (or an `exit` fault / POST /_sim/exit, which exit the
 * process with their code). Resolves after a clean stop; throws on bad flags.
 */
export async function sglangSimCommand(argv: string[]): Promise<void> {
  const cli = parseArgs(argv);
  if (cli.help) {
    process.stdout.write(HELP);
    return;
  }
  const joinGroup = await loadTransport(cli.transport);
  const sim = await startSglangSim({
    ...cli.options,
    joinGroup: joinGroup ?? undefined,
    // A simulated crash: no cleanup, the port just stops answering.
    onExit: (code) => process.exit(code),
  });
  process.stdout.write(`${JSON.stringify({ event: 'listening', url: sim.url, port: sim.port, transport: joinGroup ? 'tcp' : 'metadata' })}\n`);
  await runUntilStopped(() => sim.close(), cli.exitOnStdinClose);
}

runAsMain(import.meta.url, 'sglang-sim', sglangSimCommand);
