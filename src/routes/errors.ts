/**
 * The one error handler: ServiceError -> its status and code; schema and body-parsing failures
 * -> VALIDATION (or PAYLOAD_TOO_LARGE / UNSUPPORTED_MEDIA_TYPE); anything else -> 500 INTERNAL,
 * logged with the error, with a generic message out. Tool-call routes add the `toolResult`
 * a model should be shown.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isServiceError, type ErrorCode } from '../domain/errors.js';
import { HTTP_STATUS, RETRY_AFTER_SECONDS, reasonPhrase } from './error-status.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Errors from this route carry the model-visible `toolResult`. */
    toolCall?: boolean;
  }
}

export interface ErrorBody {
  statusCode: number;
  code: ErrorCode;
  error: string;
  message: string;
  toolResult?: { isError: true; content: string };
  location?: string;
}

export function errorBody(code: ErrorCode, message: string): ErrorBody {
  const statusCode = HTTP_STATUS[code];
  return { statusCode, code, error: reasonPhrase(statusCode), message };
}

/** Maps Fastify's own client errors (parsing, limits, validation) to our codes. */
function classify(error: FastifyError): { code: ErrorCode; message: string } {
  if (isServiceError(error)) return { code: error.code, message: error.message };
  if (error.validation !== undefined) return { code: 'VALIDATION', message: error.message };
  switch (error.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { code: 'PAYLOAD_TOO_LARGE', message: 'request body is larger than the configured limit' };
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return { code: 'UNSUPPORTED_MEDIA_TYPE', message: 'send request bodies as application/json' };
    default:
      break;
  }
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    return { code: 'VALIDATION', message: error.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || error instanceof SyntaxError ? 'body is not valid JSON' : error.message };
  }
  return { code: 'INTERNAL', message: 'internal error' };
}

/**
 * Refusals that are the service working as configured, not failures: logged without a stack,
 * at `info` (a drain is planned) or `warn` (load or an outage an operator may want to see).
 */
const EXPECTED_REFUSALS: Partial<Record<ErrorCode, 'info' | 'warn'>> = {
  DRAINING: 'info',
  RATE_LIMITED: 'warn',
  OVERLOADED: 'warn',
  AT_CAPACITY: 'warn',
  FOREST_FAILING_OVER: 'warn',
};

export function registerErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const { code, message } = classify(error);
    const body = errorBody(code, message);
    const level = EXPECTED_REFUSALS[code] ?? (body.statusCode >= 500 ? 'error' : 'info');
    if (level === 'error') request.log.error({ err: error }, 'request failed');
    else request.log[level]({ code, message }, 'request rejected');
    if (request.routeOptions.config.toolCall === true) {
      body.toolResult = { isError: true, content: `Error: ${message}` };
    }
    if (isServiceError(error) && error.location !== undefined) {
      // The owner's base URL plus this request's path: where to send it again.
      body.location = `${error.location.replace(/\/+$/, '')}${request.url}`;
      void reply.header('location', body.location);
    }
    const retryAfter = RETRY_AFTER_SECONDS[code];
    if (retryAfter !== undefined && !reply.hasHeader('retry-after')) void reply.header('retry-after', String(retryAfter));
    return reply.status(body.statusCode).send(body);
  });

  app.setNotFoundHandler((request, reply) => {
    const body = errorBody('ROUTE_NOT_FOUND', `no route ${request.method} ${request.url.split('?')[0] ?? ''}`);
    return reply.status(body.statusCode).send(body);
  });
}
