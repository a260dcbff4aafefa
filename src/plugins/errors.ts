/**
 * Error mapping as a plugin: the one error handler and the not-found handler (both in
 * src/routes/errors.ts, beside the classification of every failure into an error code), and
 * Fastify's framework errors (a URL that is not validly percent-encoded, an over-long path
 * parameter), which reach no handler and are answered here in the same shape.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errorBody, registerErrorHandling, type ErrorBody } from '../routes/errors.js';
import { rootPlugin } from './root-plugin.js';

export const errorHandling = rootPlugin('errors', async (app) => {
  registerErrorHandling(app);
});

/** Fastify's `frameworkErrors`: client errors found before routing, answered as VALIDATION. */
export function frameworkErrors(error: { code?: string }, request: FastifyRequest, reply: FastifyReply): void {
  const body: ErrorBody = errorBody('VALIDATION', error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'a path parameter is too long' : 'the URL is not validly encoded');
  // These errors skip the error handler, so a tool-call route's toolResult is added here.
  if (/^[^?]*\/tool-calls(?:\?|$)/.test(request.url)) body.toolResult = { isError: true, content: `Error: ${body.message}` };
  // And they skip the onRequest hooks, so the request id is set here too.
  void reply.header('x-request-id', request.id).status(body.statusCode).send(body);
}
