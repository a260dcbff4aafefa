/**
 * Between instances on one database (not for clients): `GET /v1/cluster/pool` answers when this
 * instance's oldest pool step was parked, which a pool claim on another instance compares
 * (src/cluster/cluster-pool.ts). Operator auth applies as on every route; it is left
 * out of the OpenAPI document. `clusterCaller` tells the routes that answer for the whole
 * cluster whether a request is a client's (ask the cluster) or another instance's (answer
 * from what is here).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import { FORWARDED_BY } from '../../cluster/peers.js';
import type { Caller, Peering } from '../../topology/topology.js';

const PoolState = Type.Object({ oldestParkedAt: Type.Union([Type.Number(), Type.Null()]) }, { additionalProperties: false });

export const clusterRoutes: FastifyPluginAsyncTypebox<{ peering: Pick<Peering, 'poolState'> }> = async (app, { peering }) => {
  app.get('/v1/cluster/pool', {
    schema: { hide: true, response: { 200: PoolState } },
  }, async () => peering.poolState());
};

/** Who asks, to be passed on to the other instances; undefined for a request another instance sent. */
export function clusterCaller(request: FastifyRequest): Caller | undefined {
  if (request.headers[FORWARDED_BY] !== undefined) return undefined;
  return { authorization: request.headers.authorization, requestId: request.id };
}
