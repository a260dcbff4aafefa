/**
 * What each request leaves behind: one log line and one metrics sample.
 *
 * The line is Fastify's `incoming request` (method, URL with query values masked, client
 * address, `reqId`), written when the request arrives, so a request that never completes (a
 * long-poll cut by a stop, an event stream) is in the log too. Fastify's second line per
 * request, `request completed`, is written at debug level only; the outcome is in the metrics
 * (`agentforest_http_requests_total` and the latency histogram, by route and status), and a rejected or failed request also
 * has the error handler's `request rejected` / `request failed` line. A request that errored
 * while its response was written is still logged at error level, as Fastify does.
 */
import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Metrics } from '../observation/metrics.js';
import { rootPlugin } from './root-plugin.js';

export class OneLinePerRequest extends LogController {
  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (error !== null && error !== undefined) super.requestCompleted(error, request, reply);
    else reply.log.debug({ res: reply, responseTime: reply.elapsedTime }, 'request completed');
  }
}

export const requestMetrics = rootPlugin<{ metrics: Pick<Metrics, 'httpRequest'> }>('request-metrics', async (app, { metrics }) => {
  // A callback hook: every request passes here, and an async one costs a promise each.
  app.addHook('onResponse', (request, reply, done) => {
    metrics.httpRequest(request.method, request.routeOptions.url ?? 'unmatched', reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
});
