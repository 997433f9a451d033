// The last step of `npm run build`: bundles the compiled CLI (dist/src/cli/main.js, from tsc) into
// dist/bundle/cli/, which bin/rlgate.mjs runs. Node 20 loads ECMAScript modules one file at a time,
// and a gateway needs about 400 of them to listen (rlgate's own, fastify's, NATS's, xstate's,
// TypeBox's); a handful of chunks cut the start-up's CPU by about a third (decision 173).
// - Code split: what the CLI loads only for one command (the trainer, the simulators, the demo) or
//   at first use stays in chunks of its own, loaded when asked for.
// - Packages: the ones every start loads and that are plain JavaScript are bundled (BUNDLED, and
//   whatever they import); every other package stays an import of node_modules as it is, above all
//   those that read files beside their own code or load native addons or worker files (zeromq,
//   msgpackr, the tokenizers, gRPC's proto loader, Swagger UI's static files, pino's transports).
// - The simulators (dist/sim/) are not bundled: the CLI imports them from dist/sim/, where they
//   find their own files (another simulator to launch, the broadcast transport) by their location.
// - The bundle sits two folders below dist/, as dist/src/<area>/ does, so paths a module finds from
//   its own location (`../../proto/`, `../../ui/`) lead to the same place.
// - Only changed files are written, and the chunks of an earlier build are left in place: a gateway
//   started before the rebuild may still import one of its own chunks lazily (`npm run prepack`
//   starts from an empty dist/).
// Run it alone with `node scripts/bundle.mjs` after tsc; it never type-checks.

import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const ENTRY = join(ROOT, 'dist/src/cli/main.js');
const OUT = join(ROOT, 'dist/bundle/cli');

/** Packages rlgate imports that go into the bundle, with what they import in turn. */
const BUNDLED = new Set(['fastify', '@nats-io/transport-node', '@nats-io/jetstream', '@nats-io/kv', 'xstate', '@sinclair/typebox', 'prom-client']);
/** Never bundled, even when a bundled package imports them: they load files by their own path. */
const NEVER = new Set(['pino', 'thread-stream', 'pino-std-serializers', 'sonic-boom', 'real-require']);

const packageOf = (spec) => (spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]);

const SIM = join(ROOT, 'dist/sim');

const packages = {
  name: 'rlgate-packages',
  setup(b) {
    // The simulators stay dist/sim/ as tsc wrote it, imported from there: they find their own
    // files (the other simulators, the broadcast transport) by their own location.
    b.onResolve({ filter: /^\.\.?\// }, (args) => {
      const target = resolve(args.resolveDir, args.path);
      if (!target.startsWith(`${SIM}/`)) return undefined;
      return { path: relative(OUT, target), external: true };
    });
    // Bare specifiers only: relative paths and node: builtins are esbuild's own business.
    b.onResolve({ filter: /^[^./]/ }, (args) => {
      if (args.path.startsWith('node:')) return { external: true };
      const pkg = packageOf(args.path);
      if (NEVER.has(pkg)) return { external: true };
      const fromDependency = args.importer.includes('/node_modules/');
      if (fromDependency || BUNDLED.has(pkg)) return undefined;
      return { external: true };
    });
  },
};

if (!existsSync(ENTRY)) {
  console.error(`bundle: ${ENTRY} is missing; run tsc first (npm run build)`);
  process.exit(1);
}

const result = await build({
  entryPoints: [ENTRY],
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  outdir: OUT,
  entryNames: '[name]',
  chunkNames: 'chunk-[hash]',
  // Bundled CommonJS packages call require() for Node's builtins; an ES module has none of its own.
  banner: { js: "import { createRequire as __rlgateCreateRequire } from 'node:module'; const require = __rlgateCreateRequire(import.meta.url);" },
  legalComments: 'eof',
  plugins: [packages],
  write: false,
  logLevel: 'warning',
});

mkdirSync(OUT, { recursive: true });
for (const file of result.outputFiles) {
  if (existsSync(file.path) && readFileSync(file.path).equals(file.contents)) continue;
  writeFileSync(file.path, file.contents);
}
