// `rlgate sim <kind>`: run one engine simulator in the foreground. The flags are checked here
// first, so a bad one prints the simulator's usage and exits 2 before anything starts.

interface Kind {
  /** The simulator's own flag parser and --help text. */
  flags: () => Promise<{ parseArgs: (argv: string[]) => { help: boolean }; HELP: string }>;
  run: (argv: string[]) => Promise<unknown>;
}

const KINDS: Record<string, Kind> = {
  sglang: {
    flags: async () => import('../../sim/sglang/options.ts'),
    run: async (a) => (await import('../../sim/sglang/main.ts')).sglangSimCommand(a),
  },
  tokenspeed: {
    flags: async () => import('../../sim/tokenspeed/cli.ts'),
    run: async (a) => (await import('../../sim/tokenspeed/main.ts')).tokenspeedSimCommand(a),
  },
  zmq: {
    flags: async () => import('../../sim/zmq/options.ts'),
    run: async (a) => (await import('../../sim/zmq/main.ts')).zmqSimCommand(a),
  },
};

const USAGE = `usage: rlgate sim <${Object.keys(KINDS).join('|')}> [flags]   (rlgate sim <kind> --help for its flags)`;

export async function simCommand(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--help' || name === '-h') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const kind = name ? KINDS[name] : undefined;
  if (!kind) {
    process.stderr.write(`${name ? `rlgate sim: unknown simulator \`${name}\`\n` : ''}${USAGE}\n`);
    return 2;
  }
  const { parseArgs, HELP } = await kind.flags();
  try {
    if (parseArgs(rest).help) {
      process.stdout.write(HELP);
      return 0;
    }
  } catch (err) {
    process.stderr.write(`rlgate sim ${name}: ${(err as Error).message}\n\n${HELP}`);
    return 2;
  }
  try {
    await kind.run(rest);
  } catch (err) {
    // A value the flag parser cannot judge (TokenSpeed's --servicer-impl) carries its own exit code.
    const code = (err as { exitCode?: unknown }).exitCode;
    if (typeof code !== 'number') throw err;
    process.stderr.write(`rlgate sim ${name}: ${(err as Error).message}\n`);
    return code;
  }
  return 0;
}
