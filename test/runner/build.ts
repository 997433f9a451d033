// Global setup of the integration tier: builds dist/ (incremental, a fraction of a second when it
// is up to date) before any file runs, because the tests spawn the compiled simulators and CLI
// (test/fixtures/entry.ts). A test file run alone (`npx vitest run test/x.integration.test.ts`)
// thus never runs a stale build.

import { execFileSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export default function build(): void {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
}
