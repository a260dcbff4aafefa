/**
 * The service's start: config -> logger -> store -> buildApp -> listen. SIGTERM/SIGINT drain
 * (readiness fails, new work is refused, long-polls end), let in-flight model requests be
 * recorded for up to the drain timeout, close the HTTP server, close open turns and the store.
 * Loaded by server.ts, which handles signals until `onSignalsHandled` says this module does.
 */
import { randomUUID } from 'node:crypto';
import closeWithGrace from 'close-with-grace';
import { TOOL_SERVER_FOLLOW_MS } from './tools/mcp/tool-servers.js';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { buildApp } from './app.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { createLogger } from './logger.js';
import { redactUrl } from './domain/store-settings.js';
import { openStore } from './composition/open-store.js';
import { createSystem } from './composition/system.js';
import { DEFAULT_DELIVERY } from './observation/webhooks/delivery-worker.js';
import { startTraceExport } from './observation/tracing/trace-export.js';

export interface StartOptions {
  /** Called once the drain handlers own SIGTERM/SIGINT (server.ts stops handling them then). */
  onSignalsHandled?: () => void;
  /** Plugins registered on the app after buildApp, before it listens (bench/server.ts adds its routes). */
  plugins?: readonly FastifyPluginAsync[];
}

export async function start({ onSignalsHandled = () => undefined, plugins = [] }: StartOptions = {}): Promise<void> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`agentforest: ${error.message}\n`);
      process.exit(78);
    }
    throw error;
  }
  const logger = createLogger(config.logLevel);
  for (const warning of config.warnings) logger.warn(warning);
  // Before anything runs a turn; off, no OpenTelemetry module is loaded.
  const traces = config.tracing.export ? await startTraceExport(config.tracing) : undefined;
  const { store, cluster } = await openStore({
    dataPath: config.dataPath,
    databaseUrl: config.databaseUrl,
    synchronous: config.sqliteSynchronous,
    cluster: { instanceId: config.instanceId ?? randomUUID(), leaseMs: config.leaseMs, confirmMs: config.configConfirmMs },
  });
  const system = createSystem({
    store,
    cluster,
    logger,
    packages: config.packages,
    reportDelivery: config.reportDelivery,
    settlementNotices: config.settlementNotices,
    idempotencyTtlMs: config.idempotencyTtlMs,
    limits: config.limits,
    processMetrics: true,
    coalesceWakeups: config.coalesceWakeups,
    stepCacheBytes: config.stepCacheBytes,
    lease: config.lease,
    driver: config.driver,
    modelPolicy: config.modelPolicy,
    modelPrices: config.modelPrices,
    modelLimits: config.modelLimits,
    spawnBudgets: config.spawnBudgets,
    toolServers: config.toolServers,
    approvalTimeoutMs: config.approvalTimeoutMs,
    webhooks: {
      allowPrivate: config.webhooks.allowPrivate,
      maxAgeMs: config.webhooks.maxAgeMs,
      timeoutMs: config.webhooks.timeoutMs,
      backoff: { ...DEFAULT_DELIVERY.backoff, baseMs: config.webhooks.backoffMs },
      perEndpoint: config.webhooks.perEndpoint,
    },
    ...(traces === undefined ? {} : { tracing: traces.tracing }),
  });
  // Where clients reach this instance (other instances send misdirected clients there): the
  // configured URL, else the address listened on (with PORT=0 known only once listening).
  let listeningAt: string | undefined = undefined;
  const advertisedUrl = (): string => config.advertiseUrl ?? listeningAt ?? `http://${config.host}:${config.port}`;
  // With several instances, the database's package configuration replaces the environment's.
  await system.topology.start(advertisedUrl);
  await system.webhooks.start();
  // With several instances each follows the cluster's tool servers.
  await system.toolServers.start(cluster === undefined ? undefined : TOOL_SERVER_FOLLOW_MS);
  await system.backendTools.start(cluster === undefined ? undefined : TOOL_SERVER_FOLLOW_MS);
  await system.approvalRules.start(cluster === undefined ? undefined : TOOL_SERVER_FOLLOW_MS);
  await system.tenants.start(cluster === undefined ? undefined : TOOL_SERVER_FOLLOW_MS);
  await system.quotaSharing.start();
  await system.providerSharing.start();
  // Expired idempotency keys are never replayed; this only reclaims their space.
  const expiry = setInterval(() => {
    system.idempotency.expire().catch((err: unknown) => logger.warn({ err }, 'expiring idempotency keys failed'));
  }, Math.min(config.idempotencyTtlMs, 10 * 60_000));
  expiry.unref();
  const app = await buildApp({
    system,
    logger,
    apiKeys: config.apiKeys,
    bodyLimit: config.bodyLimit,
    eventHeartbeatMs: config.eventHeartbeatMs,
    eventBufferBytes: config.eventBufferBytes,
    publicUrl: `http://${config.host}:${config.port}`,
    timeouts: config.timeouts,
    maxConnections: config.maxConnections,
    protection: { rateLimit: config.rateLimit, maxEventLoopDelayMs: config.maxEventLoopDelayMs },
  });
  for (const plugin of plugins) await app.register(plugin);

  if (config.apiKeys.length === 0) {
    logger.warn(
      { host: config.host },
      '!!! AGENTFOREST_API_KEYS is not set: operator routes are UNAUTHENTICATED. Serving on loopback only. ' +
        'Set AGENTFOREST_API_KEYS to require a key. !!!',
    );
  }

  closeWithGrace({ delay: config.drainTimeoutMs + 5_000, logger }, async ({ signal, err }) => {
    if (err !== undefined) logger.error({ err }, 'stopping after an uncaught error');
    logger.info({ signal }, 'draining: readiness is failing, new work is refused, open long-polls end');
    clearInterval(expiry);
    system.gate.startDrain();
    const deadline = Date.now() + config.drainTimeoutMs;
    await waitUntil(() => system.protocol.stepsInFlight(system.registry.values()) === 0, deadline);
    await closeBy(app, deadline);
    system.webhooks.stop();
    await system.roots.shutdown();
    await system.toolServers.stop();
    system.backendTools.stop();
    system.approvalRules.stop();
    system.tenants.stop();
    system.quotas.stop();
    await system.quotaSharing.stop();
    await system.providerSharing.stop();
    system.approvals.stop();
    system.pool.stop();
    await system.topology.stop();
    await store.close();
    // After the drain closed the last turns: their spans are exported before the process ends.
    await traces?.shutdown().catch((err: unknown) => logger.warn({ err }, 'exporting the last traces failed'));
    logger.info('drained and closed');
  });
  onSignalsHandled();

  const address = await app.listen({ host: config.host, port: config.port });
  listeningAt = address;
  logger.info(
    { url: address, store: store.kind, data: config.databaseUrl === undefined ? config.dataPath : redactUrl(config.databaseUrl), auth: config.apiKeys.length > 0, traces: config.tracing.export },
    `agentforest listening on ${address}`,
  );
}

/**
 * Close the HTTP server: idle connections at once, requests still open may finish until
 * `deadline`; then every connection left (a client trickling a body, say) is destroyed, so a
 * slow client cannot hold the stop.
 */
async function closeBy(app: FastifyInstance, deadline: number): Promise<void> {
  const closing = app.close();
  let timer: NodeJS.Timeout | undefined;
  const late = await Promise.race([
    closing.then(() => false),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), Math.max(0, deadline - Date.now())))),
  ]);
  clearTimeout(timer);
  if (late) {
    app.log.warn({ connections: await connectionCount(app) }, 'drain deadline reached: closing the connections still open');
    app.server.closeAllConnections();
  }
  await closing;
}

function connectionCount(app: FastifyInstance): Promise<number> {
  return new Promise((resolve) => app.server.getConnections((error, count) => resolve(error === null ? count : -1)));
}

/** Resolves when `done()` holds or at `deadline`, checking every 50 ms. */
async function waitUntil(done: () => boolean, deadline: number): Promise<void> {
  while (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
}
