/**
 * buildApp(deps): the Fastify application, as registrations only. Each concern is a named
 * plugin (src/plugins/) or a route plugin (src/routes/); the order below is the order in which
 * every request meets them. It never listens; src/start.ts does.
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { wireContract } from './plugins/contract.js';
import { clientErrors, errorHandling, frameworkErrors, schemaErrors } from './plugins/errors.js';
import { forwarding } from './plugins/forwarding.js';
import { gracefulClose } from './plugins/graceful-close.js';
import { jsonBodies } from './plugins/json-bodies.js';
import { openApi } from './plugins/openapi.js';
import { requestId, requestIdHeader } from './plugins/request-id.js';
import { OneLinePerRequest, requestMetrics } from './plugins/request-log.js';
import { agentRoutes } from './routes/agents/index.js';
import { registerOperatorAuth } from './routes/auth.js';
import { registerTenantAccess, requireListedRoutes } from './routes/tenant-access.js';
import { resourceOwners } from './composition/resource-owners.js';
import { tenantRoutes } from './routes/tenants/index.js';
import { budgetRoutes } from './routes/budgets/index.js';
import { webhookRoutes } from './routes/webhooks/index.js';
import { grantRoutes } from './routes/grants/index.js';
import { toolServerRoutes } from './routes/tool-servers/index.js';
import { backendToolRoutes } from './routes/backend-tools/index.js';
import { approvalRoutes } from './routes/approvals/index.js';
import { childRoutes } from './routes/children/index.js';
import { clusterRoutes } from './routes/cluster/index.js';
import { eventRoutes } from './routes/events/index.js';
import { healthRoutes } from './routes/health/index.js';
import { messageRoutes } from './routes/messages/index.js';
import { metricsRoutes } from './routes/metrics/index.js';
import { packageRoutes } from './routes/packages/index.js';
import { registerProtection, type ProtectionOptions } from './routes/protection.js';
import { stepRoutes } from './routes/steps/index.js';
import { uiRoutes } from './routes/ui/index.js';
import { capConnections } from './plugins/connection-cap.js';
import type { System } from './composition/system.js';
import { receiptOf } from './agents/reads/receipts.js';

export { API_VERSION } from './plugins/openapi.js';

/** Event streams send a heartbeat comment this often unless configured otherwise. */
const DEFAULT_HEARTBEAT_MS = 15_000;

export interface AppDeps {
  system: Pick<System, 'roots' | 'deliveries' | 'queries' | 'notRunning' | 'interrupts' | 'protocol' | 'toolCalls' | 'compactions' | 'gate' | 'topology' | 'streams' | 'hub' | 'metrics' | 'budgets' | 'budgetChanges' | 'grantChanges' | 'webhooks' | 'log' | 'toolServers' | 'backendTools' | 'approvals' | 'approvalRules' | 'tenants' | 'quotas' | 'registry'> & Partial<Pick<System, 'tracing'>>;
  logger: Logger;
  apiKeys?: readonly string[];
  bodyLimit?: number;
  /** Event streams: heartbeat interval and how far a consumer may fall behind (bytes). */
  eventHeartbeatMs?: number;
  eventBufferBytes?: number;
  /** Rate limit on operator routes and the overload guard (both off when omitted). */
  protection?: ProtectionOptions;
  /** The URL advertised in the OpenAPI `servers` entry. */
  publicUrl?: string;
  /** Deadlines on clients (start.ts passes the configured ones; none when omitted). */
  timeouts?: ClientTimeouts;
  /** Open connections beyond which a new one is closed at once (no cap when omitted). */
  maxConnections?: number;
}

export interface ClientTimeouts {
  /** A whole request, headers and body; then 408 and the connection closed. */
  requestMs: number;
  /** A request's headers. */
  headersMs: number;
  /** An idle keep-alive connection. */
  keepAliveMs: number;
}

/** How often Node looks for requests past their deadline (its default, 30 s, would let one run twice as long). */
const TIMEOUT_CHECK_MS = 1_000;

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    logController: new OneLinePerRequest(),
    bodyLimit: deps.bodyLimit ?? 1_048_576,
    genReqId: requestId,
    // Requests that arrive while closing are refused in the service's own shape (gracefulClose).
    return503OnClosing: false,
    // Ids may be 128 characters; longer ones must reach validation (400), not the router's 414.
    routerOptions: { maxParamLength: 256 },
    forceCloseConnections: 'idle',
    frameworkErrors,
    clientErrorHandler: clientErrors,
    schemaErrorFormatter: schemaErrors,
    ...(deps.timeouts === undefined
      ? {}
      : {
          requestTimeout: deps.timeouts.requestMs,
          keepAliveTimeout: deps.timeouts.keepAliveMs,
          // Fastify sets the server's requestTimeout from its own option above.
          http: { headersTimeout: deps.timeouts.headersMs, connectionsCheckingInterval: TIMEOUT_CHECK_MS },
        }),
  }).withTypeProvider<TypeBoxTypeProvider>();

  if (deps.maxConnections !== undefined) capConnections(app, deps.maxConnections);
  const { roots, deliveries, queries, notRunning, interrupts, protocol, toolCalls, compactions, gate, topology, streams, hub, metrics, budgets, budgetChanges, grantChanges, log } = deps.system;
  await app.register(requestIdHeader);
  await app.register(requestMetrics, { metrics });
  await app.register(gracefulClose);
  await app.register(wireContract);
  await app.register(jsonBodies);
  await app.register(errorHandling, { storeUnavailable: (error) => log.store.isUnavailable(error) });
  await registerProtection(app, deps.protection ?? {});
  registerOperatorAuth(app, deps.apiKeys ?? [], deps.system.tenants);
  // Before any route is added: a /v1 route nobody decided a tenant's access to fails the start.
  requireListedRoutes(app);
  // Before forwarding: another tenant's resource is answered here as unknown, never sent on.
  const owners = resourceOwners(deps.system);
  registerTenantAccess(app, owners);
  // Traces on: a request's `traceparent` names the trace the turns it starts continue. First of
  // the handler hooks (after the body is read), so the handler runs in that context.
  const requestContext = deps.system.tracing?.requestContext;
  if (requestContext !== undefined) app.addHook('preHandler', (request, _reply, done) => requestContext(request.headers, done));
  // Several instances: a request for an agent whose forest another instance owns goes there.
  const peering = topology.peering;
  if (peering !== undefined) {
    const streamTimeoutMs = 3 * (deps.eventHeartbeatMs ?? DEFAULT_HEARTBEAT_MS);
    await app.register(forwarding, {
      peering,
      streamTimeoutMs,
      agentOfApproval: (id) => deps.system.approvals.agentOf(id),
      mayRoute: async (request, id) => request.principal.kind === 'admin' || (await owners.agent(id))?.owner === request.principal.tenantId,
    });
  }
  await app.register(openApi, deps.publicUrl === undefined ? {} : { publicUrl: deps.publicUrl });

  await app.register(healthRoutes, {
    readiness: { draining: () => gate.draining, storeWritable: () => log.storeWritable, pingStore: () => log.store.ping() },
  });
  await app.register(agentRoutes, { roots, deliveries, queries, notRunning, interrupts, protocol, calls: toolCalls, topology });
  await app.register(childRoutes, { deliveries });
  await app.register(budgetRoutes, { budgets, changes: budgetChanges });
  await app.register(grantRoutes, { grants: grantChanges });
  await app.register(toolServerRoutes, { servers: deps.system.toolServers });
  await app.register(backendToolRoutes, { tools: deps.system.backendTools, topology, gate });
  await app.register(approvalRoutes, { rules: deps.system.approvalRules, approvals: deps.system.approvals });
  await app.register(stepRoutes, { protocol, compactions, topology });
  await app.register(messageRoutes, { receipt: (messageId) => receiptOf(log, messageId) });
  await app.register(eventRoutes, {
    streams,
    hub,
    heartbeatMs: deps.eventHeartbeatMs ?? DEFAULT_HEARTBEAT_MS,
    maxBufferedBytes: deps.eventBufferBytes ?? 1_048_576,
  });
  await app.register(packageRoutes, { packages: topology.packages });
  await app.register(tenantRoutes, { tenants: deps.system.tenants, quotas: deps.system.quotas, adminKeys: (deps.apiKeys ?? []).length > 0 });
  await app.register(webhookRoutes, { subscriptions: deps.system.webhooks.subscriptions });
  await app.register(metricsRoutes, { metrics, tenants: { ids: () => deps.system.tenants.list().map((t) => t.id), figures: (id) => deps.system.quotas.figures(id) } });
  if (peering !== undefined) await app.register(clusterRoutes, { peering });
  await app.register(uiRoutes);
  return app;
}
