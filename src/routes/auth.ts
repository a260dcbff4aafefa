/**
 * Operator authentication: `Authorization: Bearer <key>` on every /v1 route when keys are
 * configured, compared in constant time. Agent tokens are checked by the service, inside the
 * operation they guard; this module only reads the header.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ServiceError } from '../domain/errors.js';
import { digest, matchesAny } from '../agents/tokens.js';

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

export function registerOperatorAuth(app: FastifyInstance, apiKeys: readonly string[]): void {
  if (apiKeys.length === 0) return;
  const digests = apiKeys.map(digest);
  app.addHook('onRequest', async (request) => {
    // The matched route pattern, not the raw URL: a percent-encoded spelling of a path routes
    // the same way, so it must be judged the same way.
    const route = request.routeOptions.url ?? '';
    if (isPublic(route)) return;
    if (!matchesAny(bearerKey(request.headers.authorization), digests)) {
      throw new ServiceError('UNAUTHENTICATED', 'a valid operator key is required: Authorization: Bearer <key>');
    }
  });
}
