/**
 * Load protection: a rate limit on operator routes (per operator key, or per client address
 * when a request has none) and an overload guard that sheds requests with 503 OVERLOADED while
 * the event loop lags, so an overloaded instance answers quickly instead of timing out, and
 * recovers by itself once the lag passes. Health routes are never shed: they report on
 * liveness and readiness themselves.
 */
import rateLimit from '@fastify/rate-limit';
import underPressure from '@fastify/under-pressure';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ServiceError } from '../domain/errors.js';
import { digest } from '../agents/tokens.js';
import { bearerKey } from './auth.js';
import { RETRY_AFTER_SECONDS } from './error-status.js';

export interface ProtectionOptions {
  /** Operator-route requests per client per window; 0 turns it off. */
  rateLimit?: { max: number; windowMs: number };
  /** Event-loop delay (mean over a sample) above which requests are shed; 0 turns it off. */
  maxEventLoopDelayMs?: number;
  /**
   * How often the event-loop delay is sampled (default 1 s, at least 100 ms: the delay monitor
   * reads every 10 ms, and a sample with no reading counts as infinitely late).
   */
  sampleIntervalMs?: number;
}

const UNSHED = new Set(['/healthz', '/readyz']);

/** Routes only an operator calls: /v1 routes whose security names no agent token. */
function operatorOnly(request: FastifyRequest): boolean {
  const url = request.routeOptions.url ?? '';
  if (!url.startsWith('/v1/')) return false;
  const security = request.routeOptions.schema?.security as Record<string, unknown>[] | undefined;
  return security !== undefined && !security.some((scheme) => 'agentToken' in scheme);
}

/** A window as people write it: whole minutes in min, anything else in s (10 s, 1.5 s, 2 min). */
function formatWindow(ms: number): string {
  return ms % 60_000 === 0 ? `${ms / 60_000} min` : `${ms / 1_000} s`;
}

export async function registerProtection(app: FastifyInstance, options: ProtectionOptions): Promise<void> {
  const limit = options.rateLimit ?? { max: 0, windowMs: 10_000 };
  if (limit.max > 0) {
    await app.register(rateLimit, {
      global: true,
      max: limit.max,
      timeWindow: limit.windowMs,
      allowList: (request) => !operatorOnly(request),
      // One bucket per operator key (its digest: keys never sit in memory as map keys), else per address.
      keyGenerator: (request) => {
        const key = bearerKey(request.headers.authorization);
        return key !== undefined ? `key:${digest(key).toString('base64url')}` : `ip:${request.ip}`;
      },
      // `after` is the time left in the window, not the window: each is named for what it is.
      errorResponseBuilder: (_request, context) =>
        new ServiceError('RATE_LIMITED', `rate limit of ${context.max} operator requests per ${formatWindow(limit.windowMs)} exceeded; retry after ${context.after}`),
    });
  }
  const maxDelay = options.maxEventLoopDelayMs ?? 0;
  if (maxDelay > 0) {
    const sampleInterval = Math.max(100, options.sampleIntervalMs ?? 1_000);
    await app.register(underPressure, {
      maxEventLoopDelay: maxDelay,
      sampleInterval,
      retryAfter: RETRY_AFTER_SECONDS.OVERLOADED ?? 2,
      // A rejection goes to the error handler, which answers 503 OVERLOADED with Retry-After.
      pressureHandler: (request, _reply, type, value) => {
        if (UNSHED.has(request.routeOptions.url ?? '')) return undefined;
        // A sample that held no delay reading reads as infinite lag. What it shows is that the
        // loop (or the whole process, on a starved machine) stood still for at least one sample
        // interval: shed only when that alone is over the limit.
        if (type === 'eventLoopDelay' && value === Number.POSITIVE_INFINITY && sampleInterval < maxDelay) return undefined;
        const lag = typeof value === 'number' ? ` (${type} ${Math.round(value)})` : ` (${type})`;
        return Promise.reject(new ServiceError('OVERLOADED', `the service is overloaded${lag}; retry shortly`));
      },
    });
  }
}
