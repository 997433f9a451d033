// `rlgate sim <kind>`: run one engine simulator in the foreground.

const KINDS: Record<string, (argv: string[]) => Promise<unknown>> = {
  sglang: async (a) => (await import('../sim/sglang/main.ts')).sglangSimCommand(a),
  zmq: async (a) => (await import('../sim/zmq/main.ts')).zmqSimCommand(a),
  tokenspeed: async (a) => (await import('../sim/tokenspeed/main.ts')).tokenspeedSimCommand(a),
};

export async function simCommand(argv: string[]): Promise<number> {
  const [kind, ...rest] = argv;
  const run = kind ? KINDS[kind] : undefined;
  if (!run) {
    process.stderr.write(`usage: rlgate sim <${Object.keys(KINDS).join('|')}> [flags]   (--help for flags)\n`);
    return kind === '--help' ? 0 : 2;
  }
  await run(rest);
  return 0;
}
