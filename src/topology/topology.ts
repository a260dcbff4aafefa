/**
 * Where forests live: one instance that holds every forest, or several instances on one
 * database, each holding the leases of some (src/cluster/). The choice is made once, at
 * composition; the runtime and the routes only call these two ports and never ask which it is.
 *
 * - ForestPlacement: who holds a forest. The runtime takes a forest before it writes to it and
 *   gives it up when nothing of it is live here; alone, every forest is held here at once.
 * - Topology: what answers for every instance together (the live list, the worker pool, the
 *   package configuration), its start with the address clients reach this instance at, and its stop.
 */
import type { AgentView } from '../contract/index.js';
import type { ListFilter } from '../agents/reads/agent-queries.js';
import type { RenderedStep } from '../steps/rendered-step.js';
import type { PackageChanges } from '../tools/packages/package-changes.js';
import type { PoolFilter } from '../tools/backend/tool-pool.js';
import type { PoolToolCall } from '../contract/index.js';

/** The instance that holds a forest's lease, at the URL clients reach it. */
export interface ForestOwner {
  owner: string;
  ownerUrl: string;
  /** How long its lease still runs unless renewed (ms). */
  expiresInMs: number;
}

export interface ForestPlacement {
  /** True when no other instance writes to these forests, so what this instance knows of them is exact. */
  readonly exclusive: boolean;
  /** This instance's id among several; undefined alone. */
  readonly instanceId: string | undefined;
  /** Hold the forest, or throw 421 MISDIRECTED naming the instance that does. */
  acquire(rootId: string): Promise<void>;
  holds(rootId: string): boolean;
  /**
   * Run `work` holding the forest: borrowed for it when this instance does not hold it (to
   * write to a session that is not resident), given back after unless some of it is live here.
   */
  leased<T>(rootId: string, work: () => Promise<T>): Promise<T>;
  /** Give the forest up once nothing of it is live here and its writes committed. */
  releaseIfIdle(rootId: string): Promise<void>;
  /** Of these forests, the ones another instance holds now. */
  heldElsewhere(rootIds: readonly string[]): Promise<Set<string>>;
  /** The instance that holds this forest, when it is another one. */
  ownerElsewhere(rootId: string): Promise<ForestOwner | undefined>;
  /** The database refused these forests' writes: another instance holds them now. */
  lost(roots: readonly string[]): void;
}

/** Who asked, passed on to the other instances, which check the key themselves. */
export interface Caller {
  /** The caller's Authorization header, as it came. */
  authorization: string | undefined;
  requestId: string;
}

export interface AgentPage {
  items: AgentView[];
  nextCursor: string | null;
}

export type LocalClaim = { agentId: string; agentToken: string; step: RenderedStep };

/** Work claimed here, or the JSON body another instance answered a forwarded claim with. */
export type Claimed<L> = { local: L } | { forwarded: Buffer };
export type PoolClaim = Claimed<LocalClaim>;

/** An instance's answer to "when was your oldest step (or tool call) parked" (`/v1/cluster/pool`, `/v1/cluster/tool-pool`). */
export interface PoolState {
  oldestParkedAt: number | null;
}

/** Which steps a pool claim may take: of one forest, of one tenant's agents (a tenant key's claim), or any. */
export interface StepScope {
  rootId?: string;
  tenantId?: string;
}

/** What only several instances have: the id they know this one by, and what they ask it. */
export interface Peering {
  readonly instanceId: string;
  /** For a tenant key's claim, of that tenant's steps only. */
  poolState(tenantId: string | undefined): PoolState;
  /** The same question of the tool worker pool, for calls `filter` matches. */
  toolPoolState(filter: PoolFilter): PoolState;
  /** The instance holding agent `id`'s forest, when it is not this one (requests for it go there). */
  ownerOfAgent(id: string): Promise<ForestOwner | undefined>;
}

export interface Topology {
  readonly forests: ForestPlacement;
  /** What the package routes change: this process's packages, or the cluster's. */
  readonly packages: PackageChanges;
  /** Undefined with one instance. */
  readonly peering: Peering | undefined;
  /**
   * Live agents, or every child of `filter.parentId`. `caller` is undefined for a request
   * another instance sent: it is answered from this instance alone.
   */
  list(filter: ListFilter, caller: Caller | undefined): Promise<AgentPage>;
  /** The worker-pool claim: the oldest claimable step, of one forest or of any. */
  claimFromPool(waitMs: number, scope: StepScope, signal: AbortSignal | undefined, since: string | undefined, caller: Caller | undefined): Promise<PoolClaim | null>;
  /** A step was parked here with nobody here waiting for it (the other instances' pools may claim it). */
  parked(): void;
  /** The tool worker pool's claim: the oldest call `filter` matches, of any forest. */
  claimToolCall(filter: PoolFilter, waitMs: number, signal: AbortSignal | undefined, caller: Caller | undefined): Promise<Claimed<PoolToolCall> | null>;
  /** A tool call was offered here with no worker here waiting for it. */
  toolCallWaiting(): void;
  /**
   * Take up the configuration in force and follow it, renew what is held; before serving.
   * `advertisedUrl` is the address clients reach this instance at (read when needed: with
   * port 0 it is known once the server listens).
   */
  start(advertisedUrl: () => string): Promise<void>;
  /** Stop following, give every forest up. */
  stop(): Promise<void>;
}
