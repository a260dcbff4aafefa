/**
 * Error mapping as a plugin: the one error handler and the not-found handler (both in
 * src/routes/errors.ts, beside the classification of every failure into an error code), and
 * the errors that reach no handler, answered here in the same shape: Fastify's framework
 * errors (a URL that is not validly percent-encoded, an over-long path parameter) and Node's
 * client errors (malformed HTTP, a request past its deadline, headers too large).
 */
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest, FastifySchemaValidationError } from 'fastify';
import { errorBody, registerErrorHandling, type ErrorBody, type StoreUnavailable } from '../routes/errors.js';
import { rootPlugin } from './root-plugin.js';

export const errorHandling = rootPlugin<{ storeUnavailable?: StoreUnavailable }>('errors', async (app, { storeUnavailable }) => {
  registerErrorHandling(app, storeUnavailable);
});

/** Fastify's `frameworkErrors`: client errors found before routing, answered as VALIDATION. */
export function frameworkErrors(error: { code?: string }, request: FastifyRequest, reply: FastifyReply): void {
  const body: ErrorBody = errorBody('VALIDATION', error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'a path parameter is too long' : 'the URL is not validly encoded');
  // These errors skip the error handler, so a tool-call route's toolResult is added here.
  if (/^[^?]*\/tool-calls(?:\?|$)/.test(request.url)) body.toolResult = { isError: true, content: `Error: ${body.message}` };
  // And they skip the onRequest hooks, so the request id is set here too.
  void reply.header('x-request-id', request.id).status(body.statusCode).send(body);
}

/**
 * Fastify's `schemaErrorFormatter`: the validator's errors as one message, as Fastify words
 * them, except a choice among fixed values (a union of literals: one `const` error per
 * value, then `anyOf`), which is said once with the values allowed:
 * `body/delivery must be one of "followup", "inject", "steer"`.
 */
export function schemaErrors(errors: FastifySchemaValidationError[], dataVar: string): Error {
  const allowed = new Map<string, unknown[]>();
  for (const e of errors) {
    if (e.keyword === 'const') allowed.set(e.instancePath, [...(allowed.get(e.instancePath) ?? []), e.params.allowedValue]);
  }
  const parts: string[] = [];
  for (const e of errors) {
    const where = `${dataVar}${e.instancePath}`;
    const values = allowed.get(e.instancePath);
    if (e.keyword === 'const' && values !== undefined && values.length > 1) continue;
    if (e.keyword === 'anyOf' && values !== undefined && values.length > 1) parts.push(oneOf(where, values));
    else if (e.keyword === 'enum' && Array.isArray(e.params.allowedValues)) parts.push(oneOf(where, e.params.allowedValues as unknown[]));
    else parts.push(`${where} ${e.message ?? 'is invalid'}`);
  }
  return new Error(parts.join(', '));
}

function oneOf(where: string, values: readonly unknown[]): string {
  return `${where} must be one of ${values.map((v) => JSON.stringify(v)).join(', ')}`;
}

/**
 * Fastify's `clientErrorHandler`: what Node finds wrong before a request exists is answered
 * with the documented body, then the connection is closed (its state is unknown).
 */
export function clientErrors(error: Error & { code?: string }, socket: Socket): void {
  // A reset connection has nobody left to answer.
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  if (socket.writable) {
    const body = clientErrorBody(error.code);
    const text = JSON.stringify(body);
    socket.write(
      `HTTP/1.1 ${body.statusCode} ${body.error}\r\n` +
        `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`,
    );
  }
  socket.destroy(error);
}

function clientErrorBody(code: string | undefined): ErrorBody {
  switch (code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return errorBody('REQUEST_TIMEOUT', 'the request did not arrive within its deadline');
    case 'HPE_HEADER_OVERFLOW':
      return errorBody('HEADERS_TOO_LARGE', 'the request headers are too large');
    default:
      return errorBody('VALIDATION', 'the request is not valid HTTP');
  }
}
