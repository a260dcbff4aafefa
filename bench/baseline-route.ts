/**
 * The benchmark's own routes, registered only by bench/server.ts and hidden from the API
 * document:
 * - the baseline, a bare route that validates the same body as a report tool call and answers
 *   a constant; bench/ divides the report path's throughput by this route's, in the same run;
 * - the process's memory after a full garbage collection (when node runs with --expose-gc),
 *   so resident memory per agent is not read off whatever garbage happens to be uncollected,
 *   and the young generation's committed size, which bench/ takes out of it.
 */
import { getHeapSpaceStatistics } from 'node:v8';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ToolCallBody } from '../src/routes/agents/schemas.js';

export const BASELINE_BODY = ToolCallBody;

export const benchRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post('/bench/baseline', { schema: { hide: true, body: BASELINE_BODY } }, async () => ({ ok: true }));
  app.get('/bench/memory', { schema: { hide: true } }, async () => {
    const gc = (globalThis as { gc?: () => void }).gc;
    gc?.();
    const { rss, heapUsed } = process.memoryUsage();
    // The young generation is empty after a full collection, but its pages stay committed;
    // their number follows --max-semi-space-size and how the heap grew, not what is kept.
    const youngGeneration = getHeapSpaceStatistics()
      .filter((space) => space.space_name === 'new_space' || space.space_name === 'new_large_object_space')
      .reduce((sum, space) => sum + space.physical_space_size, 0);
    return { collected: gc !== undefined, rss, heapUsed, youngGeneration };
  });
};
