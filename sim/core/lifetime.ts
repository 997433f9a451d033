// How a simulator process lives and ends, shared by every simulator (never by the gateway): it
// runs until SIGTERM/SIGINT, or until its stdin closes when the parent asked for that (so a
// harness that dies never leaves a simulator behind), then stops cleanly once.

import { pathToFileURL } from 'node:url';

/** Resolves after `stop()` has run once, on the first signal or (if asked) stdin closing. */
export function runUntilStopped(stop: () => Promise<void>, exitOnStdinClose: boolean): Promise<void> {
  return new Promise<void>((resolve) => {
    let stopping = false;
    const onStop = (): void => {
      if (stopping) return;
      stopping = true;
      process.off('SIGTERM', onStop);
      process.off('SIGINT', onStop);
      if (exitOnStdinClose) process.stdin.destroy();
      stop().then(resolve, resolve);
    };
    process.on('SIGTERM', onStop);
    process.on('SIGINT', onStop);
    if (exitOnStdinClose) {
      process.stdin.on('end', onStop);
      process.stdin.on('close', onStop);
      process.stdin.on('error', onStop);
      process.stdin.resume();
    }
  });
}

/** When `moduleUrl` is the process entry point: run the command, exit 0, or print and exit with `exitCode(err)`. */
export function runAsMain(moduleUrl: string, name: string, command: (argv: string[]) => Promise<void>, exitCode: (err: unknown) => number = () => 2): void {
  if (!process.argv[1] || moduleUrl !== pathToFileURL(process.argv[1]).href) return;
  command(process.argv.slice(2)).then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`${name}: ${(err as Error)?.message ?? String(err)}\n`);
      process.exit(exitCode(err));
    },
  );
}
