// Test runner settings: test files run in forked Node processes (a crashed worker cannot take
// the runner with it); every child a fixture spawns is killed when its worker exits. Two projects,
// one after the other in the same run (one report, one exit code; sequence.groupOrder):
// - `unit` first: the plain `*.test.ts` files, the pure cores. Its setup file makes starting a
//   process, opening a socket or arming a real timer throw, so the tier stays pure and fast
//   (`npm run test:unit` runs it alone). Two workers, one per core: its files compute. Not
//   isolated either: a fork and a fresh module cache per file cost 20 s of wall and 37 s of CPU
//   for 4 s of tests; shared, the tier takes 5 s (the guard installs itself once per worker).
// - `integration` next: `*.integration.test.ts` (the browser tests under test/ui among them), the
//   chaos scenarios' short forms and the property tests. Four workers on the 2-core machines
//   this runs on: most integration files wait on leases, timeouts and child processes more than
//   they compute (753 s with two, 675 s with three, all passing; later, with more files, 447 s
//   with three and 389 s with four, the cores 78% busy); each starts its own nats-server.
//   Not isolated: a worker's files share one module cache, so each file does not import and
//   transform the gateway again (the suite was CPU-bound: 410 s isolated, 350 s not). Every file
//   builds its own gateways, buses and engines and closes them; no module keeps state between files.
// Within a tier the files start longest first (test/runner/longest-first.ts).
// Neither groupOrder is 0: vitest would run a one-worker project of group 0 last.
import { defineConfig } from 'vitest/config';
import { LongestFirst } from './test/runner/longest-first.ts';

const integrationFiles = ['test/**/*.integration.test.ts', 'test/**/*.chaos.test.ts', 'test/**/*.fuzz.test.ts'];

export default defineConfig({
  test: {
    environment: 'node',
    pool: 'forks',
    fileParallelism: true,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
    // The longest files first (test/runner/longest-first.ts), so none starts last and runs alone.
    sequence: { sequencer: LongestFirst },
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/**/*.test.ts'],
          exclude: integrationFiles,
          setupFiles: ['test/fixtures/unit-guard.ts'],
          maxWorkers: 2,
          isolate: false,
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: integrationFiles,
          // dist/ up to date before any file runs: the tests spawn the compiled simulators and CLI.
          globalSetup: ['test/runner/build.ts'],
          maxWorkers: 4,
          isolate: false,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
