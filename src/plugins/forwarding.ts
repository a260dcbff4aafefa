/**
 * Forwarding, with several instances on one database: any instance serves any request. A
 * request for an agent whose forest another live instance owns is sent on to that instance
 * over HTTP and its answer (an event stream included) streamed back, so a plain round-robin
 * load balancer works. Registered only when instances share a database: on a single instance
 * it would add an await to every agent request.
 *
 * What is checked here, before anything is forwarded: the operator key and the body limit and
 * schema (earlier hooks). Agent tokens are checked by the owner, which holds them.
 *
 * - `Prefer: redirect` asks for the old answer instead: 421 MISDIRECTED naming the owner.
 * - A forwarded request carries FORWARDED_BY; an instance never forwards such a request again
 *   (no loops): if it is not the owner either, the forest is moving, and it answers 503.
 * - An owner that does not answer (it died, and its lease has not run out) is answered 503
 *   FOREST_FAILING_OVER with `Retry-After` set to the rest of its lease.
 *
 * This only routes; it is not enforcement. Writes are fenced by the store (a write for a
 * forest this instance no longer owns is refused at commit).
 */
import replyFrom from '@fastify/reply-from';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ServiceError } from '../domain/errors.js';
import { FORWARDED_BY } from '../cluster/peers.js';
import type { ForestOwner, Peering } from '../topology/topology.js';
import { rootPlugin } from './root-plugin.js';

export type ForwardingOptions = {
  /** Who owns a forest, and this instance's id (sent in FORWARDED_BY). */
  peering: Pick<Peering, 'instanceId' | 'ownerOfAgent'>;
  /** The agent that asked for an approval: its decision goes to the instance that runs it. */
  agentOfApproval: (approvalId: string) => Promise<string | undefined>;
  /** Bound on a forwarded event stream's silence (it sends a heartbeat more often). */
  streamTimeoutMs: number;
  /**
   * Whether the caller may see agent `id` (a tenant key, another tenant's agent: no). A request
   * naming one it may not see is answered here, as one naming no agent: where it is held must
   * not show.
   */
  mayRoute: (request: FastifyRequest, id: string) => Promise<boolean>;
};

const CONNECT_TIMEOUT_MS = 3_000;
/** Added to a forwarded request's bound: the owner's answer may take a moment beyond it. */
const MARGIN_MS = 1_000;

export const forwarding = rootPlugin<ForwardingOptions>('forwarding', async (app, options) => {
  await app.register(replyFrom, {
    undici: { connections: 64, keepAliveTimeout: 60_000, connect: { timeout: CONNECT_TIMEOUT_MS } },
    // The owner's answer is the answer: never repeat a request on its behalf.
    retryMethods: [],
    maxRetriesOn503: 0,
    disableRequestLogging: true,
    destroyAgent: true,
  });

  app.addHook('preHandler', async (request, reply) => {
    const id = request.routeOptions.url === '/v1/approvals/:approvalId/decision'
      ? await options.agentOfApproval((request.params as { approvalId: string }).approvalId)
      : agentRoutedBy(request);
    if (id === undefined || !(await options.mayRoute(request, id))) return;
    const owner = await options.peering.ownerOfAgent(id);
    if (owner === undefined) return;
    if (request.headers[FORWARDED_BY] !== undefined) throw moving(id);
    if (prefersRedirect(request)) throw misdirectedTo(id, owner);
    forward(request, reply, owner, options.peering.instanceId, timeoutFor(request, owner, options.streamTimeoutMs));
    return reply;
  });
});

/**
 * The agent whose forest answers this request: the one in its path, the forest a pool claim
 * keeps to (`rootId`), the parent whose children are listed (`parentId`: their live status is
 * the owner's). Requests that name none are answered where they land.
 */
function agentRoutedBy(request: FastifyRequest): string | undefined {
  const candidates = [
    (request.params as { id?: unknown } | undefined)?.id,
    request.routeOptions.url === '/v1/steps/next' ? (request.body as { rootId?: unknown } | undefined)?.rootId : undefined,
    request.routeOptions.url === '/v1/agents' ? (request.query as { parentId?: unknown } | undefined)?.parentId : undefined,
  ];
  return candidates.find((value): value is string => typeof value === 'string');
}

/**
 * How long a forwarded request may wait for each part of the owner's answer. An owner that
 * lives renews its lease, so one that has not answered when its lease runs out is taken to be
 * dead (or paused): the client is told to retry, and by then any instance can take over. A
 * step claim may long-poll first; an event stream is silent at most a heartbeat's interval.
 */
function timeoutFor(request: FastifyRequest, owner: ForestOwner, streamTimeoutMs: number): number {
  if (request.routeOptions.url === '/v1/agents/:id/events') return Math.max(streamTimeoutMs, owner.expiresInMs + MARGIN_MS);
  const waitMs = (request.body as { waitMs?: unknown } | null | undefined)?.waitMs;
  return (typeof waitMs === 'number' ? waitMs : 0) + owner.expiresInMs + MARGIN_MS;
}

function forward(request: FastifyRequest, reply: FastifyReply, owner: ForestOwner, instanceId: string, timeoutMs: number): void {
  void reply.from(`${owner.ownerUrl.replace(/\/+$/, '')}${request.url}`, {
    timeout: timeoutMs,
    // A request sent without a body goes on without one (the routes read it as `{}`).
    ...(request.headers['content-type'] === undefined ? { body: null } : {}),
    rewriteRequestHeaders: (_request, headers) => ({ ...headers, [FORWARDED_BY]: instanceId, 'x-request-id': request.id }),
    onError: (_reply, { error }) => {
      request.log.warn({ err: error, owner: owner.owner, ownerUrl: owner.ownerUrl }, 'the owner of a forest did not answer a forwarded request');
      const retryAfterSeconds = Math.max(1, Math.ceil(owner.expiresInMs / 1000));
      void reply.header('retry-after', String(retryAfterSeconds));
      void reply.send(failingOver(owner, retryAfterSeconds));
    },
  });
}

/** `Prefer: redirect` (RFC 7240 preference tokens, any case, among others). */
function prefersRedirect(request: FastifyRequest): boolean {
  const prefer = request.headers.prefer;
  if (prefer === undefined) return false;
  const values = Array.isArray(prefer) ? prefer : [prefer];
  return values.some((value) => value.split(',').some((token) => token.split(';')[0]!.trim().toLowerCase() === 'redirect'));
}

function misdirectedTo(id: string, owner: ForestOwner): ServiceError {
  return new ServiceError('MISDIRECTED', `agent "${id}" belongs to a forest owned by the instance at ${owner.ownerUrl}; send the request there`, { location: owner.ownerUrl });
}

function moving(id: string): ServiceError {
  return new ServiceError('FOREST_FAILING_OVER', `the forest of agent "${id}" is moving between instances; retry shortly`);
}

function failingOver(owner: ForestOwner, retryAfterSeconds: number): ServiceError {
  return new ServiceError(
    'FOREST_FAILING_OVER',
    `the instance that owns this forest (${owner.owner}) does not answer; its lease runs out within ${retryAfterSeconds} s, then any instance can take the forest over`,
  );
}
