/**
 * The `Idempotency-Key` header: its schema (documented on every route that takes it) and the
 * request fingerprint the services compare on a retry.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { fingerprint, type IdempotencyRequest } from '../sessions/idempotency.js';

export const IdempotencyHeaders = Type.Object({
  'idempotency-key': Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 128,
      pattern: '^[\\x21-\\x7E]+$',
      description:
        'Retry safely: the same key from the same sender with the same request returns the original result without a second ' +
        'delivery; with a different request it is 409 IDEMPOTENCY_CONFLICT. Keys are kept for AGENTFOREST_IDEMPOTENCY_TTL_MS (default 24 h).',
    }),
  ),
});

export function idempotencyOf(request: FastifyRequest): IdempotencyRequest | undefined {
  const key = request.headers['idempotency-key'];
  if (typeof key !== 'string') return undefined;
  const route = `${request.method} ${request.routeOptions.url ?? ''} ${JSON.stringify(request.params ?? {})}`;
  return { key, fingerprint: fingerprint(route, request.body) };
}

/** Marks a replayed response, so a client can tell a retry's answer from a first one. */
export function markReplay(reply: FastifyReply, replayed: boolean): void {
  if (replayed) void reply.header('idempotent-replayed', 'true');
}
