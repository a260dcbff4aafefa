/**
 * Prometheus metrics in the text exposition format.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Metrics } from '../../observation/metrics.js';
import { tenantMetricsText, type TenantFigures } from '../../tenants/tenant-metrics.js';
import { tenantOf } from '../auth.js';
import { errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';

export interface MetricsRoutesOptions {
  metrics: Metrics;
  /** The tenants' ids and their figures (quotas.ts). */
  tenants: { ids(): string[]; figures(tenantId: string): TenantFigures };
}

export const metricsRoutes: FastifyPluginAsyncTypebox<MetricsRoutesOptions> = async (app, { metrics, tenants }) => {
  app.get('/metrics', {
    schema: {
      tags: ['operations'],
      operationId: 'getMetrics',
      summary: 'Prometheus metrics',
      description:
        'HTTP request rate and latency by route and status; live agents by kind and status; inbox depth; staged count; ' +
        'reports by delivery mode and outcome; wakeup report-to-parent-turn latency; cold resumes; settlements; drain ' +
        'state; store commit latency; per tenant, live agents and what was spent in the current windows. Needs the operator key when keys are configured. ' +
        "A tenant key gets its own tenant's series alone (`agentforest_tenant_*{tenant=\"<id>\"}`).",
      security: OPERATOR_SECURITY,
      response: {
        200: { description: 'Prometheus text format.', content: { 'text/plain': { schema: { type: 'string' } } } },
        ...errorResponses([], { bodyless: true }),
      },
    },
  }, async (request, reply) => {
    const own = tenantOf(request);
    const figures = (id: string) => ({ id, figures: tenants.figures(id) });
    if (own !== undefined) return reply.type(metrics.contentType).send(tenantMetricsText([figures(own)]));
    const text = await metrics.text();
    return reply.type(metrics.contentType).send(text + tenantMetricsText(tenants.ids().map(figures)));
  });
};
