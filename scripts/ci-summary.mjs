#!/usr/bin/env node
// Reads vitest's JSON report and prints the ten slowest files, then the one line the CI reads,
// last: `N passed, N failed`.
// Exit 1 when anything failed or no test ran. Besides failed tests it counts, as one failure each,
// a test file that failed without running any test (import/syntax error) and a run that vitest
// marked unsuccessful for a reason no test carries (e.g. an unhandled error), so the line never
// says "0 failed" about a red run. It never runs tests itself.
import { existsSync, readFileSync } from 'node:fs';

const [reportPath, vitestExit = '0'] = process.argv.slice(2);
if (!reportPath || !existsSync(reportPath)) {
  console.log(`vitest wrote no JSON report${reportPath ? ` at ${reportPath}` : ''} (exit ${vitestExit})`);
  console.log('0 passed, 0 failed');
  process.exit(1);
}

const report = JSON.parse(readFileSync(reportPath, 'utf8'));
const passed = report.numPassedTests ?? 0;
let failed = report.numFailedTests ?? 0;
const notes = [];

for (const file of report.testResults ?? []) {
  if (file.status === 'failed' && (file.assertionResults ?? []).every((a) => a.status !== 'failed')) {
    failed += 1;
    const first = String(file.message ?? '').split('\n')[0];
    notes.push(`file failed outside its tests: ${file.name}${first ? ` — ${first}` : ''}`);
  }
}
const ran = passed + failed > 0;
if (ran && failed === 0 && (report.success === false || vitestExit !== '0')) {
  failed += 1;
  notes.push(`vitest reported an unsuccessful run (exit ${vitestExit}) with no failed test; see its output above`);
}

// The ten slowest files, where the suite's time goes (its budget is 7 minutes on 2 cores).
const slowest = (report.testResults ?? [])
  .map((f) => ({ name: String(f.name ?? '').replace(`${process.cwd()}/`, ''), ms: (f.endTime ?? 0) - (f.startTime ?? 0) }))
  .sort((a, b) => b.ms - a.ms)
  .slice(0, 10);
if (slowest.length > 0) console.log(`slowest files: ${slowest.map((f) => `${f.name} ${(f.ms / 1000).toFixed(1)} s`).join(', ')}`);

const skipped = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0);
console.log(`vitest: ${report.testResults?.length ?? 0} files, ${report.numTotalTests ?? 0} tests, ${skipped} skipped/todo`);
for (const n of notes) console.log(n);
if (!ran) console.log(`no test ran (vitest exit ${vitestExit})`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
