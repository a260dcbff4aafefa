/**
 * Between instances on one database (not for clients): `GET /v1/cluster/pool` answers when this
 * instance's oldest pool step was parked, and `POST /v1/cluster/tool-pool` when its oldest tool
 * call a filter matches was offered, which a pool claim on another instance compares
 * (src/cluster/cluster-pool.ts). Operator auth applies as on every route; it is left
 * out of the OpenAPI document. `clusterCaller` tells the routes that answer for the whole
 * cluster whether a request is a client's (ask the cluster) or another instance's (answer
 * from what is here).
 *
 * The tool pool's question carries the caller's key: a tenant's is answered for its own
 * tenant's calls only, as its claim is (`poolTenant`).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import { FORWARDED_BY } from '../../cluster/peers.js';
import type { Caller, Peering } from '../../topology/topology.js';
import { tenantOf } from '../auth.js';

const PoolState = Type.Object({ oldestParkedAt: Type.Union([Type.Number(), Type.Null()]) }, { additionalProperties: false });
const ToolPoolFilter = Type.Object(
  { names: Type.Optional(Type.Array(Type.String())), rootId: Type.Optional(Type.String()), tenantId: Type.Optional(Type.String()) },
  { additionalProperties: false },
);

export const clusterRoutes: FastifyPluginAsyncTypebox<{ peering: Pick<Peering, 'poolState' | 'toolPoolState'> }> = async (app, { peering }) => {
  app.get('/v1/cluster/pool', {
    schema: { hide: true, response: { 200: PoolState } },
  }, async (request) => peering.poolState(tenantOf(request)));

  app.post('/v1/cluster/tool-pool', {
    schema: { hide: true, body: ToolPoolFilter, response: { 200: PoolState } },
  }, async (request) => {
    const tenantId = poolTenant(tenantOf(request), request.body.tenantId);
    return tenantId === null ? { oldestParkedAt: null } : peering.toolPoolState({ ...request.body, tenantId });
  });
};

/**
 * The tenant a tool pool filter keeps to: a tenant key's own (null when it names another, whose
 * calls it is never handed), or the tenant an admin key names (undefined: every tenant).
 */
export function poolTenant(own: string | undefined, named: string | undefined): string | undefined | null {
  if (own === undefined) return named;
  return named === undefined || named === own ? own : null;
}

/** Who asks, to be passed on to the other instances; undefined for a request another instance sent. */
export function clusterCaller(request: FastifyRequest): Caller | undefined {
  if (request.headers[FORWARDED_BY] !== undefined) return undefined;
  return { authorization: request.headers.authorization, requestId: request.id };
}
