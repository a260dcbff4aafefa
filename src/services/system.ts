/**
 * Wiring of the service layer: store -> session log -> registry, dispatcher, tools, setup
 * registry -> continuation manager -> agent and step services -> packages. Shared by the
 * server, the tests and the benchmarks so they all run the same composition.
 */
import type { Logger } from 'pino';
import type { ReportDelivery } from '../domain/packages.js';
import type { ModelSpec } from '../domain/model.js';
import { clockOf, type Clock, type IdSource } from '../domain/ports.js';
import type { SessionHeader } from '../domain/session.js';
import { AgentRegistry } from './agent-registry.js';
import { AgentService } from './agent-service.js';
import { EventHub } from './event-hub.js';
import { timeOrderedIds } from './ids.js';
import { DEFAULT_LIMITS, WaiterGate, type Limits } from './limits.js';
import { ForestOwnership, type OwnershipOptions } from './ownership.js';
import { EventStreams } from './event-stream.js';
import { Metrics } from './metrics.js';
import { IdempotencyKeys } from './idempotency.js';
import { DEFAULT_DRIVER_OPTIONS, ModelDriver, type DriverOptions } from './driver/model-driver.js';
import { checkModel, type ModelPolicy } from './driver/model-policy.js';
import { ContinuationManager } from './continuation/continuation-manager.js';
import { ActivationSetupRegistry } from './continuation/setup-registry.js';
import { AgentScope, LiveAgent, type LiveAgentDeps, type StepClaim } from './live-agent.js';
import { PackageManager } from './packages/package-manager.js';
import { SessionLog } from './session-log.js';
import type { SessionStore } from './session-store.js';
import { StepDispatcher } from './step-dispatcher.js';
import { StepService } from './step-service.js';
import { MemorySessionStore } from './stores/memory-store.js';
import { PostgresSessionStore } from './stores/postgres-store.js';
import { SqliteSessionStore, type SqliteSyncMode } from './stores/sqlite-store.js';
import { ToolRegistry } from './tool-registry.js';

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
  idempotency: IdempotencyKeys;
  hub: EventHub;
  streams: EventStreams;
  metrics: Metrics;
  ownership: ForestOwnership | undefined;
  driver: ModelDriver;
}

export interface SystemOptions {
  store: SessionStore;
  logger: Logger;
  clock?: Clock;
  ids?: IdSource;
  /** Installed at start; default all. */
  packages?: readonly string[] | undefined;
  reportDelivery?: ReportDelivery;
  /** How long idempotency keys are kept (default 24 h). */
  idempotencyTtlMs?: number;
  /** Overrides of DEFAULT_LIMITS. */
  limits?: Partial<Limits>;
  /** Wakeup reports join the parent's queued wakeup turn (see ContinuationDeps). */
  coalesceWakeups?: boolean;
  /** Forest leases, for several instances on one PostgreSQL database (PostgreSQL store only). */
  ownership?: OwnershipOptions;
  /** The built-in model driver: retry policy, timeout, concurrency, key lookup (default: process.env). */
  driver?: Partial<DriverOptions>;
  /** What a `model` may name (default: keys named *_API_KEY, any endpoint); keys are read from the driver's env. */
  modelPolicy?: Omit<Partial<ModelPolicy>, 'env'>;
}

export const systemClock: Clock = clockOf(() => Date.now());

/** The store the configuration names: PostgreSQL when a database URL is given, else SQLite or memory. */
export async function openStore(options: { dataPath: string; databaseUrl?: string | undefined; synchronous?: SqliteSyncMode }): Promise<SessionStore> {
  if (options.databaseUrl !== undefined) return PostgresSessionStore.open({ url: options.databaseUrl });
  if (options.dataPath === ':memory:') return new MemorySessionStore();
  return new SqliteSessionStore({ path: options.dataPath, synchronous: options.synchronous ?? 'full' });
}

export function createSystem(options: SystemOptions): System {
  const { store, logger } = options;
  const clock = options.clock ?? systemClock;
  const ids = options.ids ?? timeOrderedIds();
  const limits: Limits = { ...DEFAULT_LIMITS, ...options.limits };
  const waiters = new WaiterGate(limits.waitersPerAgent);
  const log = new SessionLog(store, logger);
  if (options.ownership !== undefined && !(store instanceof PostgresSessionStore)) {
    throw new Error('forest ownership needs the PostgreSQL store (AGENTFOREST_DATABASE_URL)');
  }
  const ownership = options.ownership === undefined ? undefined : new ForestOwnership(store as PostgresSessionStore, options.ownership, logger);
  const registry = new AgentRegistry(limits);
  const dispatcher = new StepDispatcher<LiveAgent, StepClaim>((agent) => agent.claimStep());
  const tools = new ToolRegistry();
  const setup = new ActivationSetupRegistry<AgentScope>();
  const idempotency = new IdempotencyKeys(log, clock, options.idempotencyTtlMs);

  const env = options.driver?.env ?? process.env;
  const checkModelPolicy = (spec: ModelSpec): ModelSpec => checkModel(spec, { ...options.modelPolicy, env });
  const metrics: Metrics = new Metrics({
    log,
    registry,
    isDraining: () => agents.draining,
    openStreams: () => hub.streams,
  });
  const agentDeps: LiveAgentDeps = {
    log,
    clock,
    ids,
    dispatcher,
    onInbox: (agent, event, item) => {
      if (event !== 'enqueue') manager.onInboxExit(agent, item.message.id);
    },
    onChange: (agent) => {
      manager.onAgentChange(agent);
      hub.agentChanged(agent);
    },
    maxInbox: limits.inbox,
  };
  const manager: ContinuationManager = new ContinuationManager({
    registry,
    log,
    clock,
    ids,
    logger,
    setup,
    makeAgent: (header: SessionHeader, scope: AgentScope, activationId: string) => new LiveAgent(header, agentDeps, scope, activationId),
    isDraining: () => agents.draining,
    observer: metrics.observer,
    maxDepth: limits.depth,
    coalesceWakeups: options.coalesceWakeups ?? false,
  });
  const agents: AgentService = new AgentService({
    registry,
    manager,
    log,
    clock,
    ids,
    logger,
    makeRoot: (header) => new LiveAgent(header, agentDeps),
    onDrain: () => {
      dispatcher.release();
      hub.closeAll();
    },
    idempotency,
    ...(ownership === undefined ? {} : { ownership }),
    checkModel: checkModelPolicy,
  });
  if (ownership !== undefined) {
    ownership.onLost = (roots) => agents.dropForests(roots);
    ownership.liveInForest = (root) => registry.liveInForest(root);
    ownership.durable = () => log.durable();
    log.onFenced = (roots) => ownership.lost(roots);
    ownership.start();
  }
  const hub: EventHub = new EventHub({ log, viewOf: (agent) => agents.viewOfLive(agent) });
  registry.listener = (agent, event) => {
    if (event === 'added') hub.agentChanged(agent);
    else hub.agentLeft(agent, leftStatus(agent, manager));
    // A forest's lease goes with its last live agent: a child may outlive a root disposed with
    // cascade=false.
    if (event === 'removed' && agent.header.kind === 'child' && ownership !== undefined) void ownership.releaseIfIdle(agent.rootId);
  };
  const streams = new EventStreams({ log, hub, registry, view: (id) => agents.viewIfKnown(id), waiters });
  const steps = new StepService({ agents, dispatcher, tools, log, logger, idempotency, waiters });
  const driver = new ModelDriver(
    { steps, dispatcher, log, logger, isDraining: () => agents.draining, observe: metrics.driverObserver, checkModel: checkModelPolicy },
    { ...DEFAULT_DRIVER_OPTIONS, ...options.driver, env },
  );
  dispatcher.direct = driver;
  const packages = new PackageManager(
    {
      tools,
      setup,
      manager,
      control: {
        hasContinuableChildren: (agent) => manager.hasContinuableChildren(agent),
        listChildren: (agent) => agents.listChildren(agent),
      },
    },
    { packages: options.packages, reportDelivery: options.reportDelivery ?? 'quiet', maxReportBytes: limits.reportBytes },
  );
  return { store, log, registry, dispatcher, tools, setup, manager, agents, steps, packages, idempotency, hub, streams, metrics, ownership, driver };
}

/** What an agent leaving the registry became: a settled continuable child, or closed. */
function leftStatus(agent: LiveAgent, manager: ContinuationManager): 'settled' | 'closed' {
  return agent.header.kind === 'child' && manager.settling(agent) ? 'settled' : 'closed';
}
