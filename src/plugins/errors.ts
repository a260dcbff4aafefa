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
 * them, except
 * - a choice among fixed values (a union of literals: one `const` error per value, then
 *   `anyOf`), which is said once with the values allowed:
 *   `body/delivery must be one of "followup", "inject", "steer"`;
 * - a value of several forms (a union at the top, like a step's output): only what is wrong
 *   with the form it chose, see chosenForm.
 */
export function schemaErrors(all: FastifySchemaValidationError[], dataVar: string): Error {
  const errors = chosenForm(all);
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

/**
 * The errors of the form a value of several forms chose (a union at the top, each form an
 * object). A form the value got into fails below the top (a field of it is wrong), the others
 * at the top (a property they do not have, or lack): when some errors lie below the top, they
 * are the ones that count. When every form failed at the top, a missing property says least
 * (the value is not that form): the other errors are what is wrong. Any other list is kept.
 */
function chosenForm(errors: FastifySchemaValidationError[]): FastifySchemaValidationError[] {
  if (!errors.some((e) => e.keyword === 'anyOf' && e.instancePath === '')) return errors;
  const below = errors.filter((e) => e.instancePath !== '');
  if (below.length > 0) return below;
  // Forms that fail alike (a property none of them has) say it once.
  const top = errors.filter((e, i) => e.keyword !== 'anyOf' && e.keyword !== 'required' && errors.findIndex((d) => d.message === e.message) === i);
  return top.length > 0 ? top : errors;
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
