/**
 * What a tenant key may reach, route by route. Every /v1 route is listed (a route missing here
 * fails the app's start), as one of:
 *
 * - `any`: every key; the operation itself keeps a tenant to its own (lists, pools, creation);
 * - `admin`: admin keys only; a tenant key is answered 403 UNAUTHORIZED;
 * - a resource named by a path parameter: a tenant key naming another tenant's resource is
 *   answered exactly as an id that does not exist (404, the same body), before anything runs.
 *   A global resource (made by an admin) is read by every tenant where it acts on their agents
 *   (tool servers, backend tools, approval rules) and changed only by an admin; a global
 *   webhook subscription is an admin's alone.
 *
 * Checked in a handler hook, before the operation: who owns a resource never changes once it
 * exists, so there is no window between this check and the act. A named setting a tenant puts
 * anew is checked again by its registry, in the span that writes it.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ServiceError } from '../domain/errors.js';
import type { Principal } from '../domain/tenants.js';
import { approvalRuleNotFound } from '../approvals/approval-rules.js';
import { backendToolNotFound } from '../tools/backend/backend-tools.js';
import { toolServerNotFound } from '../tools/mcp/tool-servers.js';

export const RESOURCE_KINDS = ['agent', 'message', 'approval', 'webhook', 'toolServer', 'backendTool', 'approvalRule'] as const;
export type ResourceKind = (typeof RESOURCE_KINDS)[number];

export type RouteAccess = 'any' | 'admin' | { resource: ResourceKind; param: string; change?: true };

/** A resource's owner: `{}` for a global one, `{owner}` for a tenant's; undefined for an unknown id. */
export type Ownership = { owner?: string } | undefined;

/** Who owns each kind of resource. */
export type ResourceOwners = Record<ResourceKind, (id: string) => Promise<Ownership> | Ownership>;

const agent = (change?: true): RouteAccess => ({ resource: 'agent', param: 'id', ...(change === undefined ? {} : { change }) });

/** Every /v1 route, `METHOD url`. */
export const ROUTE_ACCESS: Readonly<Record<string, RouteAccess>> = {
  'POST /v1/agents': 'any',
  'GET /v1/agents': 'any',
  'GET /v1/agents/:id': agent(),
  'DELETE /v1/agents/:id': agent(),
  'POST /v1/agents/:id/interrupt': agent(),
  'POST /v1/agents/:id/resume': agent(),
  'POST /v1/agents/:id/messages': agent(),
  'GET /v1/agents/:id/session': agent(),
  'GET /v1/agents/:id/tools': agent(),
  'POST /v1/agents/:id/tool-calls': agent(),
  'POST /v1/agents/:id/children': agent(),
  'PUT /v1/agents/:id/budget': agent(),
  'GET /v1/agents/:id/budget': agent(),
  'GET /v1/agents/:id/usage': agent(),
  'PUT /v1/agents/:id/grants': agent(),
  'GET /v1/agents/:id/grants': agent(),
  'GET /v1/agents/:id/events': agent(),
  'POST /v1/agents/:id/steps/next': agent(),
  'POST /v1/agents/:id/steps/:stepId/output': agent(),
  'POST /v1/agents/:id/steps/:stepId/deltas': agent(),
  'POST /v1/agents/:id/steps/:stepId/heartbeat': agent(),
  'POST /v1/agents/:id/steps/:stepId/tool-results': agent(),
  'POST /v1/agents/:id/compactions': agent(),
  'POST /v1/steps/next': 'any',
  'POST /v1/tool-calls/next': 'any',
  'GET /v1/messages/:messageId': { resource: 'message', param: 'messageId' },
  'GET /v1/tool-servers': 'any',
  'PUT /v1/tool-servers/:name': { resource: 'toolServer', param: 'name', change: true },
  'GET /v1/tool-servers/:name': { resource: 'toolServer', param: 'name' },
  'DELETE /v1/tool-servers/:name': { resource: 'toolServer', param: 'name', change: true },
  'GET /v1/backend-tools': 'any',
  'PUT /v1/backend-tools/:name': { resource: 'backendTool', param: 'name', change: true },
  'GET /v1/backend-tools/:name': { resource: 'backendTool', param: 'name' },
  'DELETE /v1/backend-tools/:name': { resource: 'backendTool', param: 'name', change: true },
  'GET /v1/approval-rules': 'any',
  'PUT /v1/approval-rules/:id': { resource: 'approvalRule', param: 'id', change: true },
  'DELETE /v1/approval-rules/:id': { resource: 'approvalRule', param: 'id', change: true },
  'GET /v1/approvals': 'any',
  'GET /v1/approvals/:approvalId': { resource: 'approval', param: 'approvalId' },
  'POST /v1/approvals/:approvalId/decision': { resource: 'approval', param: 'approvalId' },
  'POST /v1/webhooks': 'any',
  'GET /v1/webhooks': 'any',
  'GET /v1/webhooks/:id': { resource: 'webhook', param: 'id' },
  'DELETE /v1/webhooks/:id': { resource: 'webhook', param: 'id' },
  'GET /v1/webhooks/:id/deliveries': { resource: 'webhook', param: 'id' },
  'POST /v1/webhooks/:id/deliveries/:deliveryId/retry': { resource: 'webhook', param: 'id' },
  'GET /v1/packages': 'any',
  'PUT /v1/packages/:name': 'admin',
  'DELETE /v1/packages/:name': 'admin',
  'GET /metrics': 'any',
  'POST /v1/tenants': 'admin',
  'GET /v1/tenants': 'admin',
  'GET /v1/tenants/:id': 'admin',
  'PATCH /v1/tenants/:id': 'admin',
  'DELETE /v1/tenants/:id': 'admin',
  'POST /v1/tenants/:id/keys': 'admin',
  'GET /v1/tenants/:id/keys': 'admin',
  'DELETE /v1/tenants/:id/keys/:keyId': 'admin',
  // Between instances: each answers for what the caller's key may see.
  'GET /v1/cluster/pool': 'any',
  'POST /v1/cluster/tool-pool': 'any',
};

/** Global resources a tenant reads (they act on its agents); a global webhook is an admin's alone. */
const GLOBAL_READABLE: ReadonlySet<ResourceKind> = new Set(['toolServer', 'backendTool', 'approvalRule']);

/** The body an unknown id gets on this route: a tenant naming another tenant's resource gets the same. */
function unknown(kind: ResourceKind, id: string, route: string): ServiceError {
  switch (kind) {
    case 'agent':
      return new ServiceError('AGENT_NOT_FOUND', route === 'GET /v1/agents/:id' || route === 'DELETE /v1/agents/:id' ? `agent "${id}" is not live` : `agent "${id}" does not exist`);
    case 'message':
      return new ServiceError('MESSAGE_NOT_FOUND', `message "${id}" is not queued, staged or in any session`);
    case 'approval':
      return new ServiceError('APPROVAL_NOT_FOUND', `no approval has the id "${id}"`);
    case 'webhook':
      return new ServiceError('WEBHOOK_NOT_FOUND', `webhook "${id}" does not exist`);
    case 'toolServer':
      return toolServerNotFound(id);
    case 'backendTool':
      return backendToolNotFound(id);
    case 'approvalRule':
      return approvalRuleNotFound(id);
  }
}

/** Fail the start when a /v1 route is not listed above (a route added without deciding who may reach it). */
export function requireListedRoutes(app: FastifyInstance): void {
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (method === 'HEAD' || !(route.url.startsWith('/v1/') || route.url === '/metrics')) continue;
      if (ROUTE_ACCESS[`${method} ${route.url}`] === undefined) throw new Error(`${method} ${route.url} is not listed in ROUTE_ACCESS (src/routes/tenant-access.ts)`);
    }
  });
}

/** Keep a tenant key to its own tenant's resources (admin keys pass untouched, at no cost). */
export function registerTenantAccess(app: FastifyInstance, owners: ResourceOwners): void {
  app.addHook('preHandler', async (request) => {
    const principal = request.principal;
    if (principal.kind === 'admin') return;
    // A HEAD runs its GET's handler (Fastify adds one for every GET): it is judged as that GET.
    const url = request.routeOptions.url ?? '';
    const route = `${request.method === 'HEAD' ? 'GET' : request.method} ${url}`;
    const access = ROUTE_ACCESS[route];
    // Deny by default: a /v1 route nobody listed (there is none: the start refuses it) is not a tenant's.
    if (access === undefined && (url.startsWith('/v1/') || url === '/metrics')) throw new ServiceError('UNAUTHORIZED', 'this operation needs an admin key; a tenant key may not use it');
    if (access === undefined || access === 'any') return;
    if (access === 'admin') throw new ServiceError('UNAUTHORIZED', 'this operation needs an admin key; a tenant key may not use it');
    const id = paramOf(request, access.param);
    const found = await owners[access.resource](id);
    if (found === undefined) return;
    checkOwner(principal, access, found, id, route);
  });
}

function checkOwner(principal: Extract<Principal, { kind: 'tenant' }>, access: Exclude<RouteAccess, string>, found: { owner?: string }, id: string, route: string): void {
  if (found.owner === principal.tenantId) return;
  if (found.owner === undefined && GLOBAL_READABLE.has(access.resource)) {
    if (access.change === undefined) return;
    throw new ServiceError('UNAUTHORIZED', `"${id}" is global: only an admin key may change it`);
  }
  throw unknown(access.resource, id, route);
}

function paramOf(request: FastifyRequest, name: string): string {
  return (request.params as Record<string, string>)[name] ?? '';
}
