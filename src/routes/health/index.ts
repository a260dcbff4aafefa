/**
 * Liveness and readiness. Neither needs a key. Readiness is 503 while draining, and while the
 * session store cannot write (a commit failed and its retry has not succeeded yet) or does not
 * answer; it is 200 again as soon as it can, without a restart.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

const Health = Type.Object(
  { status: Type.String({ description: '`ok`; for readiness `ready`, `draining` or `store-unavailable`' }) },
  { additionalProperties: false },
);

/** What readiness asks. */
export interface Readiness {
  draining(): boolean;
  /** False from a failed commit until a retry succeeds. */
  storeWritable(): boolean;
  /** Rejects when the store cannot be reached. */
  pingStore(): Promise<void>;
}

export const healthRoutes: FastifyPluginAsyncTypebox<{ readiness: Readiness }> = async (app, { readiness }) => {
  app.get('/healthz', {
    schema: { tags: ['health'], operationId: 'getLiveness', summary: 'Liveness', security: [], response: { 200: Health } },
  }, async () => ({ status: 'ok' }));

  app.get('/readyz', {
    schema: {
      tags: ['health'],
      operationId: 'getReadiness',
      security: [],
      summary: 'Readiness: 503 while draining or while the session store cannot write',
      response: { 200: Health, 503: Health },
    },
  }, async (request, reply) => {
    if (readiness.draining()) return reply.status(503).send({ status: 'draining' });
    let reachable = readiness.storeWritable();
    if (reachable) {
      try {
        await readiness.pingStore();
      } catch (error) {
        request.log.warn({ error: error instanceof Error ? error.message : String(error) }, 'readiness: the session store does not answer');
        reachable = false;
      }
    }
    if (!reachable) return reply.status(503).send({ status: 'store-unavailable' });
    return { status: 'ready' };
  });
};
