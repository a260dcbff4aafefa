/**
 * Prometheus metrics in the text exposition format.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Metrics } from '../../observation/metrics.js';
import { errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';

export const metricsRoutes: FastifyPluginAsyncTypebox<{ metrics: Metrics }> = async (app, { metrics }) => {
  app.get('/metrics', {
    schema: {
      tags: ['operations'],
      operationId: 'getMetrics',
      summary: 'Prometheus metrics',
      description:
        'HTTP request rate and latency by route and status; live agents by kind and status; inbox depth; staged count; ' +
        'reports by delivery mode and outcome; wakeup report-to-parent-turn latency; cold resumes; settlements; drain ' +
        'state; store commit latency. Needs the operator key when keys are configured.',
      security: OPERATOR_SECURITY,
      response: {
        200: { description: 'Prometheus text format.', content: { 'text/plain': { schema: { type: 'string' } } } },
        ...errorResponses([], { bodyless: true }),
      },
    },
  }, async (_request, reply) => {
    const text = await metrics.text();
    return reply.type(metrics.contentType).send(text);
  });
};
