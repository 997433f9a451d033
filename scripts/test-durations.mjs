#!/usr/bin/env node
// Rewrites test/runner/durations.json from a vitest JSON report (`.ci/run` writes one; or
// `npx vitest run --reporter=json --outputFile=report.json`): each test file's wall time in
// seconds, which test/runner/longest-first.ts uses to start the long files first on a clean clone.
import { readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';

const [reportPath] = process.argv.slice(2);
if (!reportPath) {
  console.error('usage: node scripts/test-durations.mjs <vitest JSON report>');
  process.exit(2);
}
const report = JSON.parse(readFileSync(reportPath, 'utf8'));
const rows = (report.testResults ?? [])
  .map((f) => [relative(process.cwd(), String(f.name)), Math.round(((f.endTime ?? 0) - (f.startTime ?? 0)) / 100) / 10])
  .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
const out = new URL('../test/runner/durations.json', import.meta.url);
writeFileSync(out, `${JSON.stringify(Object.fromEntries(rows), null, 1)}\n`);
console.log(`wrote ${rows.length} files' durations to test/runner/durations.json`);
