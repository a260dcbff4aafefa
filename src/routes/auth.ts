/**
 * Operator authentication: `Authorization: Bearer <key>` on every /v1 route, resolved to the
 * request's principal. A key starting `afk_` is a tenant's (found by its digest; unknown or
 * revoked: 401); any other is an admin key, compared in constant time with
 * AGENTFOREST_API_KEYS. Where no admin key is configured, a request without a tenant key is
 * an admin's, as on a loopback deployment without keys. Agent tokens are checked by the
 * service, inside the operation they guard; this module only reads the header.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ServiceError } from '../domain/errors.js';
import { ADMIN, TENANT_KEY_PREFIX, type Principal } from '../domain/tenants.js';
import { digest, matchesAny } from '../agents/tokens.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Who is asking (set by the operator-auth hook; admin on public routes). */
    principal: Principal;
    /** A tenant key's request: aborts when the key is revoked (what stays open with it ends). */
    keyRevoked: AbortSignal | null;
  }
}

export const AGENT_TOKEN_HEADER = 'x-agent-token';

export function agentToken(request: FastifyRequest): string | undefined {
  const value = request.headers[AGENT_TOKEN_HEADER];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

/** The key of an `Authorization: Bearer <key>` header, or undefined. */
export function bearerKey(header: string | undefined): string | undefined {
  return header === undefined ? undefined : /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
}

/**
 * Routes anyone may call: health, the API documentation and the forest view's static shell
 * (it holds no data; the page calls /v1 with a key). Everything else needs a key: deny by default.
 */
const PUBLIC_ROUTES = new Set(['/healthz', '/readyz']);
const PUBLIC_PREFIXES = ['/docs', '/ui'];

function isPublic(route: string): boolean {
  return PUBLIC_ROUTES.has(route) || PUBLIC_PREFIXES.some((prefix) => route === prefix || route.startsWith(`${prefix}/`));
}

export interface TenantKeys {
  /** The tenant and key id of a presented key, or undefined when it is unknown or revoked. */
  keyOf(key: string): { tenantId: string; keyId: string } | undefined;
  /** Whether any tenant is defined. */
  readonly any: boolean;
  /** What ends the requests open with a key when it is revoked. */
  readonly revocations: { signalFor(keyId: string): AbortSignal };
}

export function registerOperatorAuth(app: FastifyInstance, apiKeys: readonly string[], tenantKeys: TenantKeys): void {
  const digests = apiKeys.map(digest);
  // A reference type may not be a request decoration's default: every request gets its own in the hook.
  app.decorateRequest<Principal | null>('principal', null);
  app.decorateRequest<AbortSignal | null>('keyRevoked', null);
  app.addHook('onRequest', async (request) => {
    // The matched route pattern, not the raw URL: a percent-encoded spelling of a path routes
    // the same way, so it must be judged the same way.
    const route = request.routeOptions.url ?? '';
    request.principal = isPublic(route) ? ADMIN : principalOf(bearerKey(request.headers.authorization), digests, tenantKeys);
    if (request.principal.kind === 'tenant') request.keyRevoked = tenantKeys.revocations.signalFor(request.principal.keyId);
  });
}

/**
 * An admin key first (whatever it looks like), then a tenant key; without admin keys, a request
 * without a tenant key is an admin's only while no tenant exists: once one does, dropping the
 * key must not make a tenant an admin.
 */
function principalOf(key: string | undefined, adminDigests: readonly Buffer[], tenantKeys: TenantKeys): Principal {
  if (adminDigests.length > 0 && matchesAny(key, adminDigests)) return ADMIN;
  if (key?.startsWith(TENANT_KEY_PREFIX) === true) {
    const found = tenantKeys.keyOf(key);
    if (found === undefined) throw new ServiceError('UNAUTHENTICATED', 'this tenant key is unknown or was revoked');
    return { kind: 'tenant', tenantId: found.tenantId, keyId: found.keyId };
  }
  if (adminDigests.length === 0 && !tenantKeys.any) return ADMIN;
  if (adminDigests.length === 0) throw new ServiceError('UNAUTHENTICATED', 'tenants are defined: a request needs a tenant key, or an admin key from AGENTFOREST_API_KEYS');
  throw new ServiceError('UNAUTHENTICATED', 'a valid operator key is required: Authorization: Bearer <key>');
}

/** The tenant a request acts for: a tenant key's own; undefined for an admin (every tenant). */
export function tenantOf(request: FastifyRequest): string | undefined {
  return request.principal.kind === 'tenant' ? request.principal.tenantId : undefined;
}
