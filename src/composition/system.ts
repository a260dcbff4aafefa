/**
 * Wiring of the service layer, shared by the server, the tests and the benchmarks so they all
 * run the same composition. It reads top to bottom: every object is built from objects built
 * above it, and nothing is set on an object after its construction. Where an object built
 * early must tell one built later what happened, it emits a service event (service-events.ts)
 * and the later object subscribes right after it is built; listeners of one event run in the
 * order of the subscriptions below.
 */
import type { Logger } from 'pino';
import type { ReportDelivery, SettlementNoticeMode } from '../domain/packages.js';
import type { ModelSpec } from '../domain/model.js';
import { clockOf, type Clock, type IdSource } from '../domain/ports.js';
import type { SessionHeader } from '../domain/session.js';
import { NO_PRICES, priceUsage, type ModelPrices } from '../domain/pricing.js';
import type { TokenUsage } from '../domain/model.js';
import { isClaimable } from '../domain/turn-machine.js';
import { AgentRegistry } from '../agents/agent-registry.js';
import { AgentService } from '../agents/agent-service.js';
import { AdmissionGate } from '../agents/admission-gate.js';
import { AgentQueries } from '../agents/reads/agent-queries.js';
import { NotRunningRoots } from '../agents/reads/not-running-roots.js';
import { AgentAuthority } from '../agents/authority.js';
import { AgentDeliveries } from '../agents/deliveries.js';
import { RootLifecycle } from '../agents/root-lifecycle.js';
import { BudgetChanges } from '../budgets/budget-changes.js';
import { Budgets } from '../budgets/budgets.js';
import { EventHub } from '../observation/event-hub.js';
import { timeOrderedIds } from '../sessions/ids.js';
import { DEFAULT_LIMITS, WaiterGate, type Limits } from '../agents/limits.js';
import { ClusterTopology, type ClusterOptions } from '../cluster/cluster-topology.js';
import { EventStreams } from '../observation/event-stream.js';
import { Metrics } from '../observation/metrics.js';
import { IdempotencyKeys } from '../sessions/idempotency.js';
import { DEFAULT_DRIVER_OPTIONS, drivenByModel, ModelDriver, type DriverOptions } from '../driver/model-driver.js';
import { checkModel, type ModelPolicy } from '../driver/model-policy.js';
import { ContinuationManager, type ContinuationObserver } from '../children/continuation-manager.js';
import { ActivationSetupRegistry } from '../children/setup-registry.js';
import { SettlementNotices } from '../children/settlement-notices.js';
import { AgentScope, LiveAgent, type LiveAgentDeps, type StepClaim } from '../agents/live-agent.js';
import { PackageManager } from '../tools/packages/package-manager.js';
import { ServiceEvents } from './service-events.js';
import { SessionLog } from '../sessions/session-log.js';
import { StoredSessions } from '../sessions/stored-sessions.js';
import type { SessionStore } from '../sessions/session-store.js';
import { StepDispatcher } from '../steps/step-dispatcher.js';
import { DEFAULT_LEASE, type LeaseOptions } from '../steps/step-lease.js';
import { Compactions } from '../steps/compactions.js';
import { InterruptedSteps } from '../steps/interrupted-steps.js';
import { DEFAULT_STEP_CACHE_BYTES, StepCache } from '../steps/step-cache.js';
import { Interrupts } from '../children/interrupts.js';
import { StepService } from '../steps/step-service.js';
import { SingleInstance } from '../topology/single-instance.js';
import type { Topology } from '../topology/topology.js';
import { ToolRegistry } from '../tools/tool-registry.js';
import { NO_TRACING, type Tracing, type TracingFactory } from '../observation/tracing/tracing.js';
import { DEFAULT_DELIVERY, type DeliveryOptions } from '../observation/webhooks/delivery-worker.js';
import { webhookMetrics } from '../observation/webhooks/webhook-metrics.js';
import { Webhooks, type WebhookDeps } from '../observation/webhooks/webhooks.js';

export interface System {
  store: SessionStore;
  log: SessionLog;
  registry: AgentRegistry;
  dispatcher: StepDispatcher<LiveAgent, StepClaim>;
  tools: ToolRegistry;
  setup: ActivationSetupRegistry<AgentScope>;
  manager: ContinuationManager;
  agents: AgentService;
  steps: StepService;
  packages: PackageManager;
  /** One instance, or several on one database (started before serving, stopped at close). */
  topology: Topology;
  idempotency: IdempotencyKeys;
  hub: EventHub;
  streams: EventStreams;
  metrics: Metrics;
  driver: ModelDriver;
  /** Whether new work is admitted (draining). */
  gate: AdmissionGate;
  /** Views, lists and session pages (what `agents` answers reads with). */
  queries: AgentQueries;
  /** The internal events the objects above tell each other about. */
  events: ServiceEvents;
  /** Tree budgets: the claim gate, usage figures, grants. */
  budgets: Budgets;
  /** Spans of turns, steps and tool calls (NO_TRACING unless traces are exported). */
  tracing: Tracing;
  /** The operator's budget changes. */
  budgetChanges: BudgetChanges;
  /** Webhook subscriptions, the outbox's events and their delivery (started before serving, stopped at close). */
  webhooks: Webhooks;
}

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
  /** spawn_subagent's input takes a `budget` grant from the model (default off). */
  spawnBudgets?: boolean;
  /** Builds the OpenTelemetry tracing (tracing/otel-sdk.ts); unset, tracing is off. */
  tracing?: TracingFactory;
  /** Webhook delivery (default DEFAULT_DELIVERY: private addresses refused, retried for 24 h). */
  webhooks?: Partial<DeliveryOptions>;
  /** The webhook transport (tests wrap it; default: HTTP with the address guard). */
  webhookSend?: WebhookDeps['send'];
  /** /metrics also carries the process's own metrics (prom-client's defaults); start.ts sets it, in-process test apps leave it off. */
  processMetrics?: boolean;
}

/** Forests no agent uses whose accounts one instance keeps for later reads (see ForestLedger). */
const KEEP_UNUSED_FORESTS = 256;

export const systemClock: Clock = clockOf(() => Date.now());

export function createSystem(options: SystemOptions): System {
  const { store, logger } = options;
  const clock = options.clock ?? systemClock;
  const ids = options.ids ?? timeOrderedIds();
  const limits: Limits = { ...DEFAULT_LIMITS, ...options.limits };
  const waiters = new WaiterGate(limits.waitersPerAgent);
  const env = options.driver?.env ?? process.env;
  const checkModelPolicy = (spec: ModelSpec): ModelSpec => checkModel(spec, { ...options.modelPolicy, env });

  const events = new ServiceEvents();
  const gate = new AdmissionGate(events);
  const log = new SessionLog(store, logger, (roots) => topology.forests.lost(roots));
  const registry = new AgentRegistry(limits, events);
  // One instance, or several on one database: chosen here, once. What the topology asks of
  // objects built below (this instance's list, pool claim and packages, dropping lost
  // forests), it asks through these closures, never before it starts.
  const topology: Topology =
    options.cluster === undefined
      ? new SingleInstance({
          list: (filter) => queries.list(filter),
          claimAny: (waitMs, rootId, signal, since) => steps.claimAny(waitMs, rootId, signal, since),
          packages: () => packages,
        })
      : new ClusterTopology(options.cluster, {
          logger,
          liveInForest: (root) => registry.liveInForest(root),
          durable: (root) => log.durable(root),
          onLost: (lost) => roots.dropForests(lost),
          listHere: (filter) => queries.list(filter),
          claimHere: (waitMs, rootId, signal, since) => steps.claimAny(waitMs, rootId, signal, since),
          oldestParkedAt: () => dispatcher.oldestParkedAt(),
          packages: () => packages,
          ownerOfAgent: (id) => queries.ownerElsewhere(id),
        });
  const forests = topology.forests;
  // Right after the log and the registry, which it reads: off, nothing observes the log.
  const tracing = options.tracing === undefined ? NO_TRACING : options.tracing({ registry });
  if (tracing.entries !== undefined) log.observe(tracing.entries);
  events.on('agent-left', (agent) => tracing.agentLeft(agent));
  // Before the dispatcher, whose claim gate it is.
  const budgets = new Budgets({ log, registry, events, keepUnused: forests.exclusive ? KEEP_UNUSED_FORESTS : 0 });
  const prices = options.modelPrices ?? NO_PRICES;
  const price = (usage: TokenUsage, model: string | undefined): TokenUsage => priceUsage(usage, model, prices);

  // A forest's lease goes with its last live agent: a child may outlive a root disposed with
  // cascade=false.
  events.on('agent-left', (agent) => {
    if (agent.header.kind === 'child') void forests.releaseIfIdle(agent.rootId);
  });

  // The dispatcher hands the steps of model-driven agents to the built-in driver, and the
  // driver claims them through the dispatcher and answers them through the step service,
  // which claims through the dispatcher too: a cycle. The dispatcher's direct claimant is
  // therefore a port over the service events, complete at construction (which agents it owns
  // is decided from the agent alone); the driver subscribes to it once built, below.
  const dispatcher = new StepDispatcher<LiveAgent, StepClaim>(
    (agent) => agent.steps.claim(),
    {
      owns: drivenByModel,
      offer: (agent) => events.emit('driven-step', agent),
      release: (agent) => events.emit('driven-released', agent),
    },
    budgets,
    () => topology.parked(),
  );
  events.on('draining', () => dispatcher.release());
  events.on('budget-exhausted', (agent) => dispatcher.hold(agent));
  events.on('budget-resumed', (agent) => {
    if (!agent.disposing && isClaimable(agent.state)) dispatcher.offer(agent);
  });
  const tools = new ToolRegistry();
  const setup = new ActivationSetupRegistry<AgentScope>();
  const idempotency = new IdempotencyKeys(log, clock, options.idempotencyTtlMs);

  const agentDeps: LiveAgentDeps = {
    log,
    clock,
    ids,
    dispatcher,
    onInbox: (agent, event, item) => {
      tracing.inbox(agent, event, item);
      if (event !== 'enqueue') events.emit('inbox-exit', agent);
    },
    onChange: (agent) => events.emit('agent-changed', agent),
    onTurnEnd: (agent, end) => events.emit('turn-ended', agent, end),
    onLease: (agent, event, stepId, attempt) => events.emit('step-lease', event, agent, stepId, attempt),
    maxInbox: limits.inbox,
    lease: { ...DEFAULT_LEASE, ...options.lease },
    admitsTurns: () => !gate.draining,
  };
  const manager = new ContinuationManager({
    registry,
    log,
    clock,
    ids,
    logger,
    setup,
    makeAgent: (header: SessionHeader, scope: AgentScope, activationId: string) => new LiveAgent(header, agentDeps, scope, activationId),
    isDraining: () => gate.draining,
    observer: observerOver(events),
    maxDepth: limits.depth,
    coalesceWakeups: options.coalesceWakeups ?? false,
    budgets,
  });
  events.on('inbox-exit', (agent) => manager.onInboxExit(agent));
  events.on('agent-changed', (agent) => manager.onAgentChange(agent));

  const authority = new AgentAuthority({ registry, log });
  const queries = new AgentQueries({ registry, manager, log, forests, budgets });
  const hub = new EventHub({ log, viewOf: (agent) => queries.viewOfLive(agent) });
  events.on('agent-changed', (agent) => hub.agentChanged(agent));
  events.on('agent-added', (agent) => hub.agentChanged(agent));
  events.on('agent-left', (agent) => hub.agentLeft(agent, leftStatus(agent, manager)));
  events.on('budget-exhausted', (agent, pausedBy) => hub.budgetExhausted(agent, pausedBy));
  events.on('budget-resumed', (agent) => hub.agentChanged(agent));
  events.on('draining', () => hub.closeAll());
  const streams = new EventStreams({ log, hub, registry, view: (id) => queries.viewIfKnown(id), waiters });

  const metrics = new Metrics({
    log,
    registry,
    isDraining: () => gate.draining,
    openStreams: () => hub.streams,
    paused: (agent) => budgets.pausedBy(agent) !== undefined,
    forestTotals: () => budgets.forestTotals(),
    processMetrics: options.processMetrics ?? false,
  });
  events.on('budget-exhausted', metrics.budgetPaused);
  events.on('report', metrics.observer.report);
  events.on('cold-resumed', metrics.observer.coldResumed);
  events.on('settled', metrics.observer.settled);
  events.on('step-lease', metrics.leaseObserver);
  const interruptedSteps = new InterruptedSteps();
  const interrupts = new Interrupts({
    registry,
    interrupted: interruptedSteps,
    abortDriven: (agent) => {
      if (drivenByModel(agent)) events.emit('driven-released', agent);
    },
    observe: metrics.interruptObserver,
  });

  const makeRoot = (header: SessionHeader): LiveAgent => new LiveAgent(header, agentDeps);
  const roots = new RootLifecycle({ registry, manager, log, clock, ids, gate, queries, makeRoot, forests, checkModel: checkModelPolicy, budgets, idempotency, authority });
  const deliveries = new AgentDeliveries({ registry, manager, log, gate, authority, queries, idempotency, checkModel: checkModelPolicy });
  const notRunning = new NotRunningRoots({ registry, log, forests });
  const agents = new AgentService({ gate, authority, queries, notRunning, roots, deliveries, log, interrupts });

  const stepCache = new StepCache(log, options.stepCacheBytes ?? DEFAULT_STEP_CACHE_BYTES);
  events.on('agent-left', (agent) => stepCache.forget(agent));
  events.on('turn-ended', (agent) => stepCache.turnEnded(agent));
  const stored = new StoredSessions({ registry, log, manager, forests });
  const budgetChanges = new BudgetChanges({ budgets, registry, log, clock, stored });
  const compactions = new Compactions({ authority, registry, log, clock, manager, stored, price });
  const steps = new StepService({
    authority,
    gate,
    dispatcher,
    tools,
    log,
    logger,
    idempotency,
    cache: stepCache,
    compactions,
    waiters,
    budgets,
    price,
    tracing,
    interrupted: interruptedSteps,
  });
  const driver = new ModelDriver(
    { steps, dispatcher, log, logger, isDraining: () => gate.draining, observe: metrics.driverObserver, checkModel: checkModelPolicy },
    { ...DEFAULT_DRIVER_OPTIONS, ...options.driver, env },
  );
  events.on('driven-step', (agent) => driver.offer(agent));
  events.on('driven-released', (agent) => driver.release(agent));

  const packages = new PackageManager(
    {
      tools,
      setup,
      manager,
      control: {
        hasContinuableChildren: (agent) => manager.hasContinuableChildren(agent),
        listChildren: (agent, scope) => queries.listChildren(agent, scope),
        interrupt: (caller, targetId) => interrupts.fromAncestor(caller, targetId),
      },
    },
    {
      packages: options.packages,
      reportDelivery: options.reportDelivery ?? 'quiet',
      settlementNotices: options.settlementNotices ?? 'off',
      maxReportBytes: limits.reportBytes,
      modelGrants: options.spawnBudgets ?? false,
    },
  );
  const webhooks = new Webhooks(
    { log, reads: store.webhooks, clock, ids, logger, forests, observe: webhookMetrics(metrics.registry, store.webhooks, clock), send: options.webhookSend },
    { ...DEFAULT_DELIVERY, ...options.webhooks },
  );
  events.on('report', (_delivery, outcome, messageId, child) => {
    if (outcome === 'accepted' && messageId !== undefined && child !== undefined) webhooks.events.reportDelivered(child, messageId);
  });
  events.on('budget-exhausted', (agent, pausedBy) => webhooks.events.paused(agent, pausedBy));
  events.on('step-lease', (event, agent, stepId, attempt) => {
    if (event === 'expired') webhooks.events.leaseExpired(agent, stepId, attempt);
  });

  const notices = new SettlementNotices({ registry, logger, mode: () => packages.settlementNoticesInForce(), isDraining: () => gate.draining });
  events.on('turn-ended', (agent, end) => notices.onTurnEnd(agent, end));
  return { store, log, registry, dispatcher, tools, setup, manager, agents, steps, packages, topology, idempotency, hub, streams, metrics, driver, gate, queries, events, budgets, budgetChanges, tracing, webhooks };
}

/** What an agent leaving the registry became: a settled continuable child, or closed. */
function leftStatus(agent: LiveAgent, manager: ContinuationManager): 'settled' | 'closed' {
  return agent.header.kind === 'child' && manager.settling(agent) ? 'settled' : 'closed';
}

/** The continuation manager's observer, as service events (the metrics subscribe to them). */
function observerOver(events: ServiceEvents): ContinuationObserver {
  return {
    report: (delivery, outcome, messageId, child) => events.emit('report', delivery, outcome, messageId, child),
    coldResumed: () => events.emit('cold-resumed'),
    settled: () => events.emit('settled'),
  };
}
