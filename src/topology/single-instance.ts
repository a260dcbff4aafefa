/**
 * One instance alone: it holds every forest, its live list and its pool are the whole of them,
 * and a package change is in force when it returns.
 */
import type { ListFilter } from '../agents/reads/agent-queries.js';
import { localPackageChanges } from '../tools/packages/package-changes.js';
import type { PackageManager } from '../tools/packages/package-manager.js';
import type { PoolToolCall } from '../contract/index.js';
import type { PoolFilter } from '../tools/backend/tool-pool.js';
import type { AgentPage, Claimed, ForestPlacement, LocalClaim, PoolClaim, StepScope, Topology } from './topology.js';

const EVERY_FOREST_HERE: ForestPlacement = {
  exclusive: true,
  instanceId: undefined,
  acquire: () => Promise.resolve(),
  holds: () => true,
  leased: (_rootId, work) => work(),
  releaseIfIdle: () => Promise.resolve(),
  heldElsewhere: () => Promise.resolve(new Set()),
  ownerElsewhere: () => Promise.resolve(undefined),
  lost: () => undefined,
};

export interface SingleInstanceDeps {
  list: (filter: ListFilter) => Promise<AgentPage>;
  claimAny: (waitMs: number, scope: StepScope, signal: AbortSignal | undefined, since: string | undefined) => Promise<LocalClaim | null>;
  claimToolCall: (filter: PoolFilter, waitMs: number, signal: AbortSignal | undefined) => Promise<PoolToolCall | null>;
  /** This process's packages (built after the topology; read when a change is made). */
  packages: () => PackageManager;
}

export class SingleInstance implements Topology {
  readonly forests = EVERY_FOREST_HERE;
  readonly packages;
  readonly peering = undefined;

  constructor(private readonly deps: SingleInstanceDeps) {
    this.packages = localPackageChanges(deps.packages);
  }

  list(filter: ListFilter): Promise<AgentPage> {
    return this.deps.list(filter);
  }

  async claimFromPool(waitMs: number, scope: StepScope, signal: AbortSignal | undefined, since: string | undefined): Promise<PoolClaim | null> {
    const local = await this.deps.claimAny(waitMs, scope, signal, since);
    return local === null ? null : { local };
  }

  parked(): void {}

  async claimToolCall(filter: PoolFilter, waitMs: number, signal: AbortSignal | undefined): Promise<Claimed<PoolToolCall> | null> {
    const local = await this.deps.claimToolCall(filter, waitMs, signal);
    return local === null ? null : { local };
  }

  toolCallWaiting(): void {}

  start(): Promise<void> {
    return Promise.resolve();
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }
}
