// `rlgate <command>`: the one entry point behind `npx rlgate`. Each command lives in its own
// module and is loaded only when asked for, so `rlgate sim sglang` never loads the gateway.
// `rlgate --version` before any command prints the package's version (after a command, `--version`
// is that command's: `rlgate refit --version V` is a weight version).

import { packageVersion } from '../api/package-version.ts';
import { redactUrl } from '../obs/redact-url.ts';

const COMMANDS: Record<string, { summary: string; run: (argv: string[]) => Promise<number | void> }> = {
  gateway: { summary: 'run a gateway replica (embedded nats-server unless --nats-url)', run: async (a) => (await import('./gateway.ts')).gatewayCommand(a) },
  sim: { summary: 'run an engine simulator: sim sglang|tokenspeed|zmq [flags]', run: async (a) => (await import('./sim.ts')).simCommand(a) },
  serve: {
    summary: 'a fleet of engines (simulators or a real engine command) and its gateway in one command',
    run: async (a) => (await import('./serve.ts')).serveCommand(a),
  },
  demo: { summary: 'embedded NATS, three simulated engines, the gateway and two refits', run: async (a) => (await import('./demo.ts')).demoCommand(a) },
  watch: { summary: 'print engine actor transitions as they are published on NATS', run: async (a) => (await import('./watch.ts')).watchCommand(a) },
  refit: {
    summary: 'ask the gateway for a refit over NATS (rl.refit.request) and print the report',
    run: async (a) => (await import('./refit.ts')).refitCommand(a),
  },
  trainer: {
    summary: 'trainer client: a distributed (NCCL-style) refit through the gateway',
    run: async (a) => (await import('./trainer/main.ts')).trainerCommand(a),
  },
};

function usage(): string {
  const lines = [
    'usage: rlgate <command> [flags]   (rlgate <command> --help for its flags)',
    '       rlgate --version | -V       (the package version)',
    '',
    'commands:',
  ];
  for (const [name, c] of Object.entries(COMMANDS)) lines.push(`  ${name.padEnd(9)} ${c.summary}`);
  return lines.join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--version' || name === '-V') {
    process.stdout.write(`rlgate ${packageVersion()}\n`);
    return 0;
  }
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(`${usage()}\n`);
    return name ? 0 : 2;
  }
  const command = COMMANDS[name];
  if (!command) {
    process.stderr.write(`rlgate: unknown command \`${name}\`\n\n${usage()}\n`);
    return 2;
  }
  // `-h` is `--help` for every command, whether or not its own parser knows the short form.
  const code = await command.run(rest.map((a) => (a === '-h' ? '--help' : a)));
  return typeof code === 'number' ? code : 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== 0) process.exitCode = code;
  },
  (err: unknown) => {
    // A message may quote an argument: a server URL's password never reaches the terminal.
    process.stderr.write(`rlgate: ${redactUrl((err as Error)?.message ?? String(err))}\n`);
    process.exitCode = 1;
  },
);
