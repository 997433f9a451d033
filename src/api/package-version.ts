// The version in rlgate's package.json, for `rlgate --version` and the API document's info.

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The nearest rlgate package.json up from this module: two folders up from src/api/ (run through
 * tsx), three from dist/src/api/ (compiled) or from dist/bundle/cli/ (bundled into a chunk).
 */
export function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let up = 0; up < 5; up++, dir = dirname(dir)) {
    let pkg: { name?: unknown; version?: unknown };
    try {
      pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as typeof pkg;
    } catch {
      continue; // not here: one level up
    }
    if (pkg.name === 'rlgate' && typeof pkg.version === 'string') return pkg.version;
  }
  throw new Error('package.json of rlgate not found next to the code');
}
