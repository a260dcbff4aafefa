/**
 * Request ids: a caller's `X-Request-Id` is kept when it is a plain token of at most 128
 * characters (so it can be searched for in the logs), otherwise a UUID is made. Every response
 * carries the id back in `X-Request-Id`, error responses included; the event stream, which
 * writes its own head, sets it there too.
 */
import { randomUUID } from 'node:crypto';
import type { RawRequestDefaultExpression } from 'fastify';
import { rootPlugin } from './root-plugin.js';

const GIVEN_ID = /^[\w.:-]{1,128}$/;

/** Fastify's `genReqId`: the caller's id when it is usable, else a new UUID. */
export function requestId(req: RawRequestDefaultExpression): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && GIVEN_ID.test(given) ? given : randomUUID();
}

export const requestIdHeader = rootPlugin('request-id', async (app) => {
  // Set when the request arrives: headers set then survive to every reply, errors included.
  // A callback hook: every request passes here, and an async one costs a promise each.
  app.addHook('onRequest', (request, reply, done) => {
    void reply.header('x-request-id', request.id);
    done();
  });
});
