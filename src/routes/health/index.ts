/**
 * Liveness and readiness. Neither needs a key. Readiness is 503 while draining.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AgentService } from '../../services/agent-service.js';

const Health = Type.Object({ status: Type.String() }, { additionalProperties: false });

export const healthRoutes: FastifyPluginAsyncTypebox<{ agents: AgentService }> = async (app, { agents }) => {
  app.get('/healthz', {
    schema: { tags: ['health'], operationId: 'getLiveness', summary: 'Liveness', security: [], response: { 200: Health } },
  }, async () => ({ status: 'ok' }));

  app.get('/readyz', {
    schema: {
      tags: ['health'],
      operationId: 'getReadiness',
      security: [],
      summary: 'Readiness: 503 while draining',
      response: { 200: Health, 503: Health },
    },
  }, async (_request, reply) => {
    if (agents.draining) return reply.status(503).send({ status: 'draining' });
    return { status: 'ready' };
  });
};
