/**
 * Benchmark helpers, registered only when AGENTFOREST_BENCH_BASELINE=1 and hidden from the
 * API document:
 * - the baseline, a bare route that validates the same body as a report tool call and answers
 *   a constant; bench/ divides the report path's throughput by this route's, in the same run;
 * - the process's memory after a full garbage collection (when node runs with --expose-gc),
 *   so resident memory per agent is not read off whatever garbage happens to be uncollected.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ToolCallBody } from '../agents/schemas.js';

export const benchBaselineRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post('/bench/baseline', { schema: { hide: true, body: ToolCallBody } }, async () => ({ ok: true }));
  app.get('/bench/memory', { schema: { hide: true } }, async () => {
    const gc = (globalThis as { gc?: () => void }).gc;
    gc?.();
    const { rss, heapUsed } = process.memoryUsage();
    return { collected: gc !== undefined, rss, heapUsed };
  });
};
