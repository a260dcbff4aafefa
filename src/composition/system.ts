/**
 * The wiring of the runtime, shared by the server, the tests and the benchmarks so they all run
 * the same composition. It reads top to bottom, and nothing is set on an object after its
 * construction: every collaborator is a constructor argument. Where an object built early must
 * reach one built later (the two steer each other), it is given a closure over it, called only
 * once construction is over. What only watches hears the runtime through one observer list,
 * written once at the end (observation/runtime-observer.ts); its order means nothing.
 *
 * The store comes in opened (open-store.ts picks the adapter); the topology (one instance or
 * several on one database) is chosen here, once.
 */
import type { SystemOptions } from './system-options.js';
export type { SystemOptions } from './system-options.js';
import type { ModelSpec } from '../domain/model.js';
import type { AgentView } from '../contract/index.js';
import { clockOf, type Clock } from '../domain/ports.js';
import type { SessionHeader } from '../domain/session.js';
import { NO_PRICES, priceUsage } from '../domain/pricing.js';
import type { TokenUsage } from '../domain/model.js';
import { isClaimable } from '../domain/turn-machine.js';
import { hasSettled } from '../domain/lifecycle.js';
import { AgentRegistry } from '../agents/agent-registry.js';
import { AdmissionGate } from '../agents/admission-gate.js';
import { AgentQueries } from '../agents/reads/agent-queries.js';
import { NotRunningRoots } from '../agents/reads/not-running-roots.js';
import { AgentAuthority } from '../agents/authority.js';
import { AgentDeliveries } from '../agents/deliveries.js';
import { RootLifecycle } from '../agents/root-lifecycle.js';
import { BudgetChanges } from '../budgets/budget-changes.js';
import { AccountWrites } from '../budgets/account-writes.js';
import { GrantChanges } from '../tools/grant-changes.js';
import { ToolPool } from '../tools/backend/tool-pool.js';
import { Budgets } from '../budgets/budgets.js';
import { EventHub } from '../observation/event-hub.js';
import { StepDeltas } from '../observation/step-deltas.js';
import { timeOrderedIds } from '../sessions/ids.js';
import { DEFAULT_LIMITS, WaiterGate, type Limits } from '../agents/limits.js';
import { ClusterTopology } from '../cluster/cluster-topology.js';
import { EventStreams } from '../observation/event-stream.js';
import { Metrics } from '../observation/metrics.js';
import { Observers, type RuntimeObserver } from '../observation/runtime-observer.js';
import { IdempotencyKeys } from '../sessions/idempotency.js';
import { DEFAULT_DRIVER_OPTIONS, drivenByModel, ModelDriver } from '../driver/model-driver.js';
import { checkModel } from '../driver/model-policy.js';
import { ToolGrants } from '../tools/grants.js';
import { buildContinuation } from '../children/continuation.js';
import { ActivationSetupRegistry } from '../children/setup-registry.js';
import { SettlementNotices } from '../children/settlement-notices.js';
import { AgentScope, LiveAgent, type LiveAgentDeps, type StepClaim } from '../agents/live-agent.js';
import { packageManager } from './package-manager-part.js';
import { SessionLog } from '../sessions/session-log.js';
import { StoredSessions } from '../sessions/stored-sessions.js';
import { StepDispatcher } from '../steps/step-dispatcher.js';
import { DEFAULT_LEASE } from '../steps/step-lease.js';
import { Compactions } from '../steps/compactions.js';
import { InterruptedSteps } from '../steps/interrupted-steps.js';
import { DEFAULT_STEP_CACHE_BYTES, StepCache } from '../steps/step-cache.js';
import { Interrupts } from '../children/interrupts.js';
import { StepProtocol } from '../steps/step-protocol.js';
import { CallRules, refuseWhilePending } from '../approvals/call-rules.js';
import { ReopenedCalls } from '../steps/reopened-calls.js';
import { ToolCalls } from '../tools/tool-calls.js';
import { SingleInstance } from '../topology/single-instance.js';
import type { Topology } from '../topology/topology.js';
import { ToolRegistry } from '../tools/tool-registry.js';
import { NO_TRACING } from '../observation/tracing/tracing.js';
import { DEFAULT_DELIVERY } from '../observation/webhooks/delivery-worker.js';
import { webhookMetrics } from '../observation/webhooks/webhook-metrics.js';
import { Webhooks } from '../observation/webhooks/webhooks.js';
import { ApprovalRules } from '../approvals/approval-rules.js';
import { Approvals, DEFAULT_APPROVAL_TIMEOUT_MS } from '../approvals/approvals.js';
import { approvalMetrics } from '../approvals/approval-metrics.js';
import type { RuleDecision } from '../domain/approvals.js';
import { settingsRegistries } from './settings-registries.js';
import { quotaParts } from './quota-parts.js';
import { providerParts } from './provider-parts.js';

import type { System } from './system-parts.js';

export type { System } from './system-parts.js';

/** Forests no agent uses whose accounts one instance keeps for later reads (see ForestLedger). */
const KEEP_UNUSED_FORESTS = 256;

export const systemClock: Clock = clockOf(() => Date.now());


export function createSystem(options: SystemOptions): System {
  const { store, logger } = options;
  if (options.cluster !== undefined && (options.cluster.database as object) !== store) {
    throw new Error('several instances need the store opened with the cluster\'s fences (composition/open-store.ts openClusterStore)');
  }
  const clock = options.clock ?? systemClock;
  const ids = options.ids ?? timeOrderedIds();
  const limits: Limits = { ...DEFAULT_LIMITS, ...options.limits };
  const waiters = new WaiterGate(limits.waitersPerAgent);
  const env = options.driver?.env ?? process.env;
  // A model key variable given to a tenant is its agents' (and its tool servers') alone.
  const modelPolicy = { ...options.modelPolicy, env, keyOwner: (name: string) => tenants.keyOwner(name) };
  const checkModelPolicy = (spec: ModelSpec, tenantId?: string): ModelSpec => checkModel(spec, modelPolicy, tenantId);

  // Every object below is built from objects built above it. Where two steer each other (the
  // dispatcher asks the driver's gate, the driver's workers claim from the dispatcher; a lost
  // forest's roots are dropped by the lifecycle built from the log that learns of the loss),
  // the earlier one is given a closure over the later one, called only after construction.
  // What only watches hears the runtime through `observers`, listed once at the end.
  const observers = new Observers(() => watching);
  const gate = new AdmissionGate(() => {
    dispatcher.release();
    observers.draining();
  });
  const log = new SessionLog(store, logger, (roots) => topology.forests.lost(roots), {
    // The budgets' ledger first: a step's charge is in force before anything else hears of it.
    headerQueued: (header) => {
      budgets.ledger.headerQueued(header);
      observers.headerQueued(header);
    },
    entryQueued: (item) => {
      budgets.ledger.entryQueued(item);
      quotas.entryQueued(item);
      observers.entryQueued(item);
    },
    committed: (batch, elapsedMs) => observers.committed(batch, elapsedMs),
  });
  const registry = new AgentRegistry(limits, {
    added: (agent) => {
      quotas.agentAdded(agent);
      observers.agentAdded(agent);
    },
    left: (agent) => {
      budgets.agentLeft(agent);
      quotas.agentLeft(agent);
      approvals.agentLeft(agent);
      // A forest's lease goes with its last live agent: a child may outlive a root disposed with cascade=false.
      if (agent.header.kind === 'child') void forests.releaseIfIdle(agent.rootId);
      observers.agentLeft(agent, agent.header.kind === 'child' && hasSettled(agent.lifecycle) ? 'settled' : 'closed');
    },
  });
  // One instance, or several on one database: chosen here, once. What the topology asks of
  // objects built below (this instance's list, pool claim and packages, dropping lost
  // forests), it asks through these closures, never before it starts.
  const topology: Topology =
    options.cluster === undefined
      ? new SingleInstance({
          list: (filter) => queries.list(filter),
          claimAny: (waitMs, scope, signal, since) => protocol.claimAny(waitMs, scope, signal, since),
          claimToolCall: (filter, waitMs, signal) => pool.claim(filter, waitMs, signal),
          packages: () => packages,
        })
      : new ClusterTopology(options.cluster, {
          logger,
          liveInForest: (root) => registry.liveInForest(root),
          durable: (root) => log.durable(root),
          onLost: (lost) => {
            budgets.forestsLost(lost);
            roots.dropForests(lost);
          },
          listHere: (filter) => queries.list(filter),
          claimHere: (waitMs, scope, signal, since) => protocol.claimAny(waitMs, scope, signal, since),
          oldestParkedAt: (tenantId) => dispatcher.oldestParkedAt(tenantId),
          tools: { claim: (filter, waitMs, signal) => pool.claim(filter, waitMs, signal), oldestWaiting: (filter) => pool.oldestWaiting(filter) },
          settingsChanged: () => {
            toolServers.resync();
            backendTools.resync();
            approvalRules.resync();
            tenants.resync();
          },
          packages: () => packages,
          ownerOfAgent: (id) => queries.ownerElsewhere(id),
        });
  const forests = topology.forests;
  const tracing = options.tracing === undefined ? NO_TRACING : options.tracing({ registry });
  // Before the dispatcher, whose claim gate it is.
  const budgets = new Budgets({
    log,
    registry,
    keepUnused: forests.exclusive ? KEEP_UNUSED_FORESTS : 0,
    onPaused: (agent, pausedBy) => {
      dispatcher.hold(agent);
      observers.budgetExhausted(agent, pausedBy);
    },
    onResumed: (agent) => {
      if (!agent.disposing && isClaimable(agent.state)) dispatcher.offer(agent);
      observers.budgetResumed(agent);
    },
  });
  // Beside the budgets, the claim gate of a tenant's time quotas.
  const { quotas, quotaSharing } = quotaParts({
    clock, logger, log, store, registry,
    instanceId: () => topology.peering?.instanceId,
    shared: options.cluster !== undefined,
    active: () => tenants.any,
    quotasOf: (tenantId) => tenants.find(tenantId)?.quotas,
    dispatcher: () => dispatcher,
  });
  const prices = options.modelPrices ?? NO_PRICES;
  const price = (usage: TokenUsage, model: string | undefined): TokenUsage => priceUsage(usage, model, prices);

  // The steps of model-driven agents go to the built-in driver's lane, the others to the pool.
  const dispatcher = new StepDispatcher<LiveAgent, StepClaim>(
    (agent) => agent.steps.claim(),
    { runs: drivenByModel, admits: (agent): boolean => driver.admits(agent) },
    { admits: (agent) => budgets.admits(agent) && quotas.admits(agent) },
    () => topology.parked(),
  );
  const grants = new ToolGrants(budgets.ledger);
  const tools = new ToolRegistry(grants);
  const setup = new ActivationSetupRegistry<AgentScope>();
  const idempotency = new IdempotencyKeys(log, clock, options.idempotencyTtlMs);

  const agentDeps: LiveAgentDeps = {
    log,
    clock,
    ids,
    dispatcher,
    // An inbox effect happens inside a transition, whose end tells the closing (onChange).
    onInbox: (agent, event, item) => observers.inbox(agent, event, item),
    onChange: (agent) => {
      continuation.closing.noteChange(agent);
      observers.agentChanged(agent);
    },
    onTurnEnd: (agent, end) => {
      budgets.turnEnded(agent);
      quotas.turnEnded(agent);
      notices.onTurnEnd(agent, end);
      approvals.turnEnded(agent);
      observers.turnEnded(agent, end);
    },
    onLease: (agent, event, stepId, attempt) => observers.stepLease(event, agent, stepId, attempt),
    // The protocol is built below from agents made with these deps: called only once it exists.
    rerunAfterRestart: (agent, stepId, calls) => reopenedCalls.take(agent, stepId, calls),
    // A step whose calls the tool workers hold, or a person is asked about, waits for them.
    workersHold: (agent, stepId) => pool.holds(agent, stepId) || approvals.holds(agent, stepId),
    waitsOnPerson: (agent, callId) => approvals.pendingFor(agent, callId) !== undefined,
    maxInbox: limits.inbox,
    lease: { ...DEFAULT_LEASE, ...options.lease },
    admitsTurns: () => !gate.draining,
  };
  const continuation = buildContinuation({
    registry,
    log,
    clock,
    ids,
    logger,
    setup,
    makeAgent: (header: SessionHeader, scope: AgentScope, activationId: string) => new LiveAgent(header, agentDeps, scope, activationId),
    isDraining: () => gate.draining,
    observer: observers,
    maxDepth: limits.depth,
    coalesceWakeups: options.coalesceWakeups ?? false,
    budgets,
    grants,
    quotas,
  });

  const authority = new AgentAuthority({ registry, log });
  const waiting = (agent: LiveAgent): AgentView['waiting'] => quotas.heldBy(agent) ?? driver.waitingFor(agent);
  const queries = new AgentQueries({ registry, activations: continuation.activations, log, forests, budgets, waiting });
  const hub = new EventHub({ viewOf: (agent) => queries.viewOfLive(agent) });
  const streams = new EventStreams({ log, hub, registry, view: (id) => queries.viewIfKnown(id), waiters });

  const metrics = new Metrics({
    registry,
    isDraining: () => gate.draining,
    openStreams: () => hub.streams,
    paused: (agent) => budgets.pausedBy(agent) !== undefined,
    forestTotals: () => budgets.forestTotals(),
    processMetrics: options.processMetrics ?? false,
  });
  const approvalEnded = approvalMetrics(metrics.registry, store.approvals, clock);
  const interruptedSteps = new InterruptedSteps();
  const interrupts = new Interrupts({
    registry,
    interrupted: interruptedSteps,
    observe: (origin, count) => observers.interrupted(origin, count),
    storedHeader: (id) => queries.storedHeader(id),
    durable: (root) => log.durable(root),
  });

  const makeRoot = (header: SessionHeader): LiveAgent => new LiveAgent(header, agentDeps);
  const roots = new RootLifecycle({
    registry,
    closing: continuation.closing,
    children: continuation.children,
    log,
    clock,
    ids,
    gate,
    queries,
    makeRoot,
    forests,
    checkModel: checkModelPolicy,
    budgets,
    idempotency,
    authority,
    // Only an agent a later incarnation can re-open keeps its waiting turn open over a stop.
    waitsOnPerson: (agent) => approvals.waitsOn(agent) && (agent.header.kind === 'root' || (agent.header.mode === 'continuable' && agent.header.provider === 'in-process')),
    quotas,
  });
  const deliveries = new AgentDeliveries({ registry, children: continuation.children, log, gate, authority, queries, idempotency, checkModel: checkModelPolicy });
  const notRunning = new NotRunningRoots({ registry, log, forests });

  const stepCache = new StepCache(log, options.stepCacheBytes ?? DEFAULT_STEP_CACHE_BYTES);
  const stored = new StoredSessions({ registry, log, lock: continuation.lock, forests });
  const accountWrites = new AccountWrites({ registry, log, stored, forests, budgets });
  const budgetChanges = new BudgetChanges({ budgets, clock, writes: accountWrites });
  const grantChanges = new GrantChanges({ grants, tools, budgets, registry, log, clock, writes: accountWrites });
  const compactions = new Compactions({ authority, registry, log, clock, lock: continuation.lock, stored, price });
  const approvalRules = new ApprovalRules({ log, settings: store.settings, clock, logger });
  const rule = (tool: string, rootId: string, tenantId: string | undefined): RuleDecision => approvalRules.decide(tool, rootId, tenantId);
  const callRules = new CallRules({ tools, rule });
  const approvals = new Approvals({
    rules: approvalRules,
    log,
    stored,
    registry,
    clock,
    logger,
    timeoutMs: options.approvalTimeoutMs ?? DEFAULT_APPROVAL_TIMEOUT_MS,
    pathOf: (agent) => budgets.ledger.lineage(agent.id),
    execute: (agent, stepId, call) => protocol.runApproved(agent, stepId, call),
    onEnded: (approval, waitedMs) => approvalEnded(approval, waitedMs),
    // The child's new token goes to its parent's next step, as a send_message's would.
    reopenChild: async (id) => {
      const child = await continuation.children.reopen(id);
      const parent = child === undefined ? undefined : registry.get(child.header.parentSession ?? '');
      if (child !== undefined && parent !== undefined) protocol.noteLateCredentials(parent, { resumed: [{ agentId: child.id, agentToken: child.token }] });
    },
  });
  const toolCalls = new ToolCalls({
    authority,
    tools,
    log,
    logger,
    idempotency,
    tracing,
    clock,
    rule,
    refuseWhilePending: (agent, stepId, callId) => refuseWhilePending(approvals.pendingFor(agent, callId), stepId),
  });
  const pool = new ToolPool({
    clock,
    log,
    lease: { ...DEFAULT_LEASE, ...options.lease },
    live: (id) => registry.get(id),
    onOffered: (agent, stepId, call) => observers.toolCallRequested(agent, stepId, call),
    onWaiting: () => topology.toolCallWaiting(),
  });
  const protocol = new StepProtocol({
    deltas: new StepDeltas(hub),
    authority,
    gate,
    dispatcher,
    tools,
    calls: toolCalls,
    log,
    cache: stepCache,
    waiters,
    budgets,
    quotas,
    price,
    tracing,
    interrupted: interruptedSteps,
    pool,
    rules: callRules,
    approvals,
  });
  const reopenedCalls = new ReopenedCalls({ tools, calls: toolCalls, log, pool, rules: callRules, approvals });
  const { providers, providerSharing } = providerParts({ clock, logger, log, store, limits: options.modelLimits, instanceId: () => topology.peering?.instanceId, database: options.cluster?.database, observe: (event) => observers.modelRequest(event) });
  const driver = new ModelDriver(
    { protocol, compactions, dispatcher, log, logger, isDraining: () => gate.draining, observe: (event) => observers.modelRequest(event), checkModel: checkModelPolicy, providers },
    { ...DEFAULT_DRIVER_OPTIONS, ...options.driver, env },
  );

  const packages = packageManager({ tools, setup, continuation, queries, interrupts }, options, limits);
  const webhooks = new Webhooks(
    { log, reads: store.webhooks, clock, ids, logger, forests, observe: webhookMetrics(metrics.registry, store.webhooks, clock), send: options.webhookSend },
    { ...DEFAULT_DELIVERY, ...options.webhooks },
  );
  const notices = new SettlementNotices({ registry, logger, mode: () => packages.settlementNoticesInForce(), isDraining: () => gate.draining });

  // Everything that only watches, once. Its order means nothing.
  const watching: readonly RuntimeObserver[] = [
    hub.observer,
    metrics.observer,
    webhooks.observer,
    { agentLeft: (agent) => stepCache.forget(agent), turnEnded: (agent) => stepCache.turnEnded(agent) },
    ...(tracing.observer === undefined ? [] : [tracing.observer]),
    ...(options.observers ?? []),
  ];
  const { toolServers, backendTools, tenants } = settingsRegistries(
    { log, settings: store.settings, tools, policy: modelPolicy, metrics, topology, onTenantChange: (id) => quotas.changed(id), hasLiveHere: (id) => quotas.hasLiveHere(id), clock, logger },
    options.toolServers,
  );

  // Its workers wait on the dispatcher's driver lane from now on, and stop once draining.
  driver.start();
  return { store, log, registry, dispatcher, tools, setup, continuation, roots, deliveries, notRunning, authority, interrupts, protocol, toolCalls, compactions, packages, topology, idempotency, hub, streams, metrics, driver, gate, queries, notices, observers, budgets, budgetChanges, grantChanges, tracing, webhooks, toolServers, backendTools, pool, approvals, approvalRules, tenants, quotas, quotaSharing, providers, providerSharing };
}
