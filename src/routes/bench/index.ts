/**
 * The benchmark baseline: a bare route that validates the same body as a report tool call and
 * answers a constant. Registered only when AGENTFOREST_BENCH_BASELINE=1, hidden from the API
 * document; bench/ divides the report path's throughput by this route's, in the same run.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ToolCallBody } from '../agents/schemas.js';

export const benchBaselineRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post('/bench/baseline', { schema: { hide: true, body: ToolCallBody } }, async () => ({ ok: true }));
};
