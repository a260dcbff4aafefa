import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The PostgreSQL server the tests create databases on, and the server the e2e tests spawn,
    // compiled once for the run.
    globalSetup: ['test/fixtures/postgres-global-setup.ts', 'test/fixtures/server-build-global-setup.ts'],
    environment: 'node',
    // Most test files wait on real servers, sockets and timers rather than compute, so two
    // files at a time pay off even on two cores (vitest's default there is one).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
