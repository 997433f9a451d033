#!/usr/bin/env node
// The published entry point: runs the compiled CLI with plain node. `npm run build` (which
// `npm install` and `npm ci` run through `prepare`) compiles src/ to dist/src/ and bundles it into
// dist/bundle/cli/ (scripts/bundle.mjs), which starts in about two thirds of the CPU. Without the
// bundle it runs dist/src/; a checkout whose dist/ is missing (installed with --ignore-scripts, or
// dist/ deleted) runs the TypeScript sources through tsx, a development dependency, and says so
// once on stderr. It never builds anything itself.
import { existsSync } from 'node:fs';

const bundled = new URL('../dist/bundle/cli/main.js', import.meta.url);
const compiled = new URL('../dist/src/cli/main.js', import.meta.url);

if (existsSync(bundled)) {
  await import(bundled.href);
} else if (existsSync(compiled)) {
  await import(compiled.href);
} else {
  process.stderr.write('rlgate: dist/ is not built (npm run build); running the TypeScript sources through tsx\n');
  let register;
  try {
    ({ register } = await import('tsx/esm/api'));
  } catch {
    process.stderr.write('rlgate: tsx is not installed either; run `npm install` (it builds dist/)\n');
    process.exit(1);
  }
  register();
  await import('../src/cli/main.ts');
}
