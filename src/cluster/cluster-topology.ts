/**
 * Several instances on one database behind any balancer: each holds the leases of some forests
 * (ownership.ts), and together they answer the live list and the worker pools (cluster.ts) and
 * keep one package configuration (cluster-packages.ts). Built with the fences the store was
 * opened with, so the database refuses the writes of a forest this instance no longer holds.
 *
 * What it calls of objects built after it (this instance's list, pool claim and packages), it
 * calls through the closures it is given; none of them is called before `start`.
 */
import type { Logger } from 'pino';
import type { ListFilter } from '../agents/reads/agent-queries.js';
import type { PackageManager } from '../tools/packages/package-manager.js';
import type { PoolToolCall } from '../contract/index.js';
import type { PoolFilter } from '../tools/backend/tool-pool.js';
import type { AgentPage, Caller, Claimed, ForestOwner, LocalClaim, PoolClaim, PoolState, StepScope, Topology } from '../topology/topology.js';
import type { ClusterDatabase } from './cluster-database.js';
import { Cluster, type LocalToolPool } from './cluster.js';
import { ClusterPackages, DEFAULT_CONFIRM_MS, DEFAULT_POLL_MS } from './cluster-packages.js';
import type { LeaseFence, PackageFence } from './fences.js';
import { ForestOwnership } from './ownership.js';

export interface ClusterOptions {
  /** The session store's database, as the cluster uses it (leases, packages, notifications). */
  database: ClusterDatabase;
  /** The fences the store was opened with; the lease fence names this instance. */
  fences: { leases: LeaseFence; packages: PackageFence };
  leaseMs: number;
  /** How long a package change waits for the other instances (default DEFAULT_CONFIRM_MS). */
  confirmMs?: number | undefined;
  /** The fallback package version check's period (default DEFAULT_POLL_MS). */
  pollMs?: number | undefined;
}

export interface ClusterTopologyDeps {
  logger: Logger;
  /** How many agents of each forest are live here. */
  liveInForest: (rootId: string) => number;
  /** Waits until every write accepted so far committed; rejects if this forest's were refused. */
  durable: (rootId: string) => Promise<void>;
  /** Forests whose lease was lost: their live agents must go. */
  onLost: (roots: readonly string[]) => void;
  listHere: (filter: ListFilter) => Promise<AgentPage>;
  claimHere: (waitMs: number, scope: StepScope, signal: AbortSignal | undefined, since: string | undefined) => Promise<LocalClaim | null>;
  oldestParkedAt: (tenantId: string | undefined) => number | undefined;
  /** This instance's tool worker pool. */
  tools: LocalToolPool;
  /** Another instance changed operator settings: read them again. */
  settingsChanged: () => void;
  packages: () => PackageManager;
  /** The instance holding agent `id`'s forest, when it is another one. */
  ownerOfAgent: (id: string) => Promise<ForestOwner | undefined>;
}

export class ClusterTopology implements Topology {
  readonly forests: ForestOwnership;
  readonly packages: ClusterPackages;
  readonly peering;
  private readonly cluster: Cluster;

  constructor(
    options: ClusterOptions,
    private readonly deps: ClusterTopologyDeps,
  ) {
    const { logger } = deps;
    this.forests = new ForestOwnership(options.database.leases, options.fences.leases, options.leaseMs, {
      logger,
      liveInForest: deps.liveInForest,
      durable: deps.durable,
      onLost: deps.onLost,
    });
    this.cluster = new Cluster({
      database: options.database,
      ownership: this.forests,
      oldestParkedAt: deps.oldestParkedAt,
      claimHere: (waitMs, tenantId, signal, since) => deps.claimHere(waitMs, tenantId === undefined ? {} : { tenantId }, signal, since),
      listHere: deps.listHere,
      tools: deps.tools,
      settingsChanged: deps.settingsChanged,
      logger,
    });
    this.packages = new ClusterPackages(
      { manager: deps.packages, database: options.database, fence: options.fences.packages, logger },
      { instanceId: this.forests.instanceId, confirmMs: options.confirmMs ?? DEFAULT_CONFIRM_MS, pollMs: options.pollMs ?? DEFAULT_POLL_MS },
    );
    const forests = this.forests;
    const cluster = this.cluster;
    this.peering = {
      instanceId: forests.instanceId,
      poolState: (tenantId: string | undefined): PoolState => cluster.poolState(tenantId),
      toolPoolState: (filter: PoolFilter): PoolState => cluster.toolPoolState(filter),
      ownerOfAgent: (id: string): Promise<ForestOwner | undefined> => deps.ownerOfAgent(id),
    };
  }

  list(filter: ListFilter, caller: Caller | undefined): Promise<AgentPage> {
    if (filter.parentId !== undefined || caller === undefined) return this.deps.listHere(filter);
    return this.cluster.list.list(filter, caller);
  }

  async claimFromPool(waitMs: number, scope: StepScope, signal: AbortSignal | undefined, since: string | undefined, caller: Caller | undefined): Promise<PoolClaim | null> {
    if (scope.rootId === undefined && caller !== undefined) return this.cluster.claimStep(waitMs, scope.tenantId, signal, since, caller);
    const local = await this.deps.claimHere(waitMs, scope, signal, since);
    return local === null ? null : { local };
  }

  /** A step was parked here with nobody here waiting: the other instances' pools hear of it. */
  parked(): void {
    this.cluster.parked();
  }

  /** Every instance's calls; a claim another instance forwarded is answered from this one's. */
  async claimToolCall(filter: PoolFilter, waitMs: number, signal: AbortSignal | undefined, caller: Caller | undefined): Promise<Claimed<PoolToolCall> | null> {
    if (caller !== undefined) return this.cluster.claimToolCall(filter, waitMs, signal, caller);
    const local = await this.deps.tools.claim(filter, waitMs, signal);
    return local === null ? null : { local };
  }

  toolCallWaiting(): void {
    this.cluster.toolCallWaiting();
  }

  async start(advertisedUrl: () => string): Promise<void> {
    this.forests.start(advertisedUrl);
    // The database's package configuration replaces the environment's before serving.
    await this.packages.start(advertisedUrl);
    await this.cluster.start();
  }

  async stop(): Promise<void> {
    await this.cluster.stop();
    await this.packages.stop();
    await this.forests.stop();
  }
}
