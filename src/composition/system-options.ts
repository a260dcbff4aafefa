/**
 * What a composition of the runtime is built from (createSystem in system.ts): the opened
 * store, the logger, and every option a deployment or a test may set.
 */
import type { Logger } from 'pino';
import type { ReportDelivery, SettlementNoticeMode } from '../domain/packages.js';
import type { Clock, IdSource } from '../domain/ports.js';
import type { ModelPrices } from '../domain/pricing.js';
import type { Limits } from '../agents/limits.js';
import type { ClusterOptions } from '../cluster/cluster-topology.js';
import type { RuntimeObserver } from '../observation/runtime-observer.js';
import type { DriverOptions } from '../driver/model-driver.js';
import type { ModelPolicy } from '../driver/model-policy.js';
import type { ModelLimits } from '../driver/provider-limits.js';
import type { SessionStore } from '../sessions/session-store.js';
import type { LeaseOptions } from '../steps/step-lease.js';
import type { TracingFactory } from '../observation/tracing/tracing.js';
import type { DeliveryOptions } from '../observation/webhooks/delivery-worker.js';
import type { WebhookDeps } from '../observation/webhooks/webhooks.js';

export interface SystemOptions {
  store: SessionStore;
  logger: Logger;
  clock?: Clock;
  ids?: IdSource;
  /** Installed at start; default all. */
  packages?: readonly string[] | undefined;
  reportDelivery?: ReportDelivery;
  /** Which turn ends of continuable children notify their parents (default off; see settlement-notices.ts). */
  settlementNotices?: SettlementNoticeMode;
  /** How long idempotency keys are kept (default 24 h). */
  idempotencyTtlMs?: number;
  /** Overrides of DEFAULT_LIMITS. */
  limits?: Partial<Limits>;
  /** Wakeup reports join the parent's queued wakeup turn (see ContinuationDeps). */
  coalesceWakeups?: boolean;
  /** The most the step cache may hold of rendered conversations (default DEFAULT_STEP_CACHE_BYTES). */
  stepCacheBytes?: number;
  /** Step leases (default DEFAULT_LEASE: 5 minutes, 3 attempts). */
  lease?: Partial<LeaseOptions>;
  /** Several instances on one database (the store opened with the cluster's fences); unset, one instance. */
  cluster?: ClusterOptions | undefined;
  /** The built-in model driver: retry policy, timeout, concurrency, key lookup (default: process.env). */
  driver?: Partial<DriverOptions>;
  /** What a `model` may name (default: keys named *_API_KEY, any endpoint); keys are read from the driver's env. */
  modelPolicy?: Omit<Partial<ModelPolicy>, 'env'>;
  /** Prices that give usage its cost (default none). */
  modelPrices?: ModelPrices;
  /** Requests and tokens per minute the driver may send each provider (AGENTFOREST_MODEL_LIMITS; default none). */
  modelLimits?: ModelLimits;
  /** spawn_subagent's input takes a `budget` grant from the model (default off). */
  spawnBudgets?: boolean;
  /**
   * MCP tool servers: stdio commands allowed (default off), calls to one server at once, and
   * whether a tenant's server may be at a loopback, private or link-local address (default
   * off; tests only: no environment variable turns it on).
   */
  toolServers?: { commands?: boolean; concurrency?: number; tenantPrivateAddresses?: boolean };
  /** How long an approval waits for a person's decision (default DEFAULT_APPROVAL_TIMEOUT_MS). */
  approvalTimeoutMs?: number;
  /** Builds the OpenTelemetry tracing (tracing/otel-sdk.ts); unset, tracing is off. */
  tracing?: TracingFactory;
  /**
   * Webhook delivery (default DEFAULT_DELIVERY: private addresses refused, retried for 24 h).
   * `allowPrivate` lets an admin's subscriptions reach private addresses; `tenantPrivateAddresses`
   * a tenant's (default off; tests only: no environment variable turns it on).
   */
  webhooks?: Partial<DeliveryOptions>;
  /** The webhook transport (tests wrap it; default: HTTP with the address guard). */
  webhookSend?: WebhookDeps['send'];
  /** Observers beyond the service's own (a test's probe); they hear what the others hear. */
  observers?: readonly RuntimeObserver[];
  /** /metrics also carries the process's own metrics (prom-client's defaults); start.ts sets it, in-process test apps leave it off. */
  processMetrics?: boolean;
}
