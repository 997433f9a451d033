// Test runner settings: every file under test/ runs in its own forked Node process (a crashed
// test file cannot take nats-server children or sockets of another file with it). Three workers
// on the 2-core machines this runs on: most integration files wait on leases, timeouts and child
// processes more than they compute (753 s with two, 675 s with three, all passing); integration
// files each start their own nats-server.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    environment: 'node',
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    maxWorkers: 3,
    fileParallelism: true,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
  },
});
