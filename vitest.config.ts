import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

/**
 * Test files that replace a module (`vi.mock`): they run each in a fresh module registry. Every
 * other file shares its worker's registry with the files before it (`isolate: false`), which
 * saves importing the service again for each of them; they build their own servers, stores and
 * harnesses, so nothing else carries over. test/architecture.test.ts checks this list.
 */
export const ISOLATED_TEST_FILES = ['test/security/secrets-and-input.test.ts', 'test/services/store-migrations.test.ts'];

/** What both projects share (the global setup stays the run's, run once). */
const common = { environment: 'node', testTimeout: 20_000, hookTimeout: 30_000 } as const;

export default defineConfig({
  test: {
    // The PostgreSQL server the tests create databases on, and the server the e2e tests spawn,
    // compiled once for the run.
    globalSetup: ['test/fixtures/postgres-global-setup.ts', 'test/fixtures/server-build-global-setup.ts'],
    // Most test files wait on real servers, sockets and timers rather than compute, so two
    // files at a time pay off even on two cores (vitest's default there is one).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    projects: [
      { test: { ...common, name: 'shared', include: ['test/**/*.test.ts'], exclude: ISOLATED_TEST_FILES, isolate: false } },
      { test: { ...common, name: 'isolated', include: ISOLATED_TEST_FILES, isolate: true } },
    ],
  },
});
