/**
 * The one error handler: ServiceError -> its status and code; schema and body-parsing failures
 * -> VALIDATION (or PAYLOAD_TOO_LARGE / UNSUPPORTED_MEDIA_TYPE); anything else -> 500 INTERNAL,
 * logged with the error, with a generic message out. Tool-call routes add the `toolResult`
 * a model should be shown.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isServiceError, MESSAGES, type ErrorCode } from '../domain/errors.js';
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

/**
 * Tells an error of the session store that cannot be reached or cannot write (a database server
 * down, a full disk) from a fault: the store's own judgement (SessionStore.isUnavailable).
 */
export type StoreUnavailable = (error: unknown) => boolean;

/** Maps Fastify's own client errors (parsing, limits, validation) and store outages to our codes. */
function classify(error: FastifyError, storeUnavailable: StoreUnavailable): { code: ErrorCode; message: string } {
  if (isServiceError(error)) return { code: error.code, message: error.message };
  if (storeUnavailable(error)) return { code: 'STORE_UNAVAILABLE', message: MESSAGES.storeUnreachable };
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
  // Logged with the store's own error as its cause, in one line.
  STORE_UNAVAILABLE: 'warn',
};

/**
 * The most of a refused body read and thrown away before the 413 goes out. A client streaming
 * a body it cannot know is too large reads the answer only once it has sent it all (or gets a
 * reset, EPIPE, if the connection closes under it); past this it is closed anyway.
 */
const DISCARD_LIMIT_BYTES = 16 * 1024 * 1024;

export function registerErrorHandling(app: FastifyInstance, storeUnavailable: StoreUnavailable = () => false): void {
  app.setErrorHandler(async (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const { code, message } = classify(error, storeUnavailable);
    const body = errorBody(code, message);
    const level = EXPECTED_REFUSALS[code] ?? (body.statusCode >= 500 ? 'error' : 'info');
    if (level === 'error') request.log.error({ err: error }, 'request failed');
    else if (code === 'STORE_UNAVAILABLE') request.log.warn({ code, message, cause: causeText(error) }, 'request rejected');
    else request.log[level]({ code, message }, 'request rejected');
    if (request.routeOptions.config.toolCall === true) {
      body.toolResult = { isError: true, content: `Error: ${message}` };
    }
    if (isServiceError(error) && error.location !== undefined) {
      // The owner's base URL plus this request's path: where to send it again.
      body.location = `${error.location.replace(/\/+$/, '')}${request.url}`;
      void reply.header('location', body.location);
    }
    const retryAfter = (isServiceError(error) ? error.retryAfterSeconds : undefined) ?? RETRY_AFTER_SECONDS[code];
    if (retryAfter !== undefined && !reply.hasHeader('retry-after')) void reply.header('retry-after', String(retryAfter));
    if (code === 'PAYLOAD_TOO_LARGE' && !request.raw.readableEnded) {
      // The rest of the body is never parsed: the connection cannot carry another request.
      void reply.header('connection', 'close');
      await discardBody(request.raw, DISCARD_LIMIT_BYTES);
    }
    return reply.status(body.statusCode).send(body);
  });

  app.setNotFoundHandler((request, reply) => {
    const body = errorBody('ROUTE_NOT_FOUND', `no route ${request.method} ${request.url.split('?')[0] ?? ''}`);
    return reply.status(body.statusCode).send(body);
  });
}

/** The store's own error behind a STORE_UNAVAILABLE answer, as one line. */
function causeText(error: unknown): string {
  const cause = isServiceError(error) && error.cause !== undefined ? error.cause : error;
  return cause instanceof Error ? cause.message : String(cause);
}

/** Reads and drops what is left of a request body, up to `limit` bytes or its end or error. */
function discardBody(raw: IncomingMessage, limit: number): Promise<void> {
  return new Promise((resolve) => {
    let seen = 0;
    const done = (): void => {
      raw.off('data', onData);
      raw.off('end', done);
      raw.off('error', done);
      raw.off('close', done);
      resolve();
    };
    const onData = (chunk: Buffer): void => {
      seen += chunk.length;
      if (seen > limit) done();
    };
    raw.on('data', onData);
    raw.once('end', done);
    raw.once('error', done);
    raw.once('close', done);
    raw.resume();
  });
}
