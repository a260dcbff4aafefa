/**
 * What several instances on one PostgreSQL database answer together: the list of every live
 * agent (cluster-list.ts), the step pool and the tool worker pool of every forest
 * (cluster-pool.ts), over calls between instances (peers.ts) and each pool's work board
 * (work-board.ts), whose news arrives on a LISTEN connection of its own with the news that
 * operator settings changed. Built only with forest ownership; one instance alone has none of it.
 */
import type { Logger } from 'pino';
import type { ListFilter } from '../agents/reads/agent-queries.js';
import type { PoolToolCall } from '../contract/index.js';
import type { PoolFilter } from '../tools/backend/tool-pool.js';
import type { AgentPage, Caller, Claimed, LocalClaim, PoolState } from '../topology/topology.js';
import { SETTINGS_CHANGED, type ClusterDatabase, type Listener } from './cluster-database.js';
import { ClusterList } from './cluster-list.js';
import { ClusterPool } from './cluster-pool.js';
import type { ForestOwnership } from './ownership.js';
import { PeerClient } from './peers.js';
import { TOOL_WORK_CHANNEL, WORK_CHANNEL, WorkBoard } from './work-board.js';

/** This instance's tool worker pool, as the cluster asks it. */
export interface LocalToolPool {
  claim: (filter: PoolFilter, waitMs: number, signal: AbortSignal | undefined) => Promise<PoolToolCall | null>;
  /** When the oldest call `filter` matches that no worker holds was offered, if one is. */
  oldestWaiting: (filter: PoolFilter) => number | undefined;
}

export interface ClusterDeps {
  database: ClusterDatabase;
  ownership: Pick<ForestOwnership, 'instanceId' | 'peers'>;
  /** When this instance's oldest parked step was parked, if one is. */
  oldestParkedAt: (tenantId: string | undefined) => number | undefined;
  /** This instance's own pool claim, of any forest (of one tenant's agents, for a tenant key). */
  claimHere: (waitMs: number, tenantId: string | undefined, signal: AbortSignal | undefined, since: string | undefined) => Promise<LocalClaim | null>;
  /** This instance's own live list. */
  listHere: (filter: ListFilter) => Promise<AgentPage>;
  tools: LocalToolPool;
  /** Another instance changed operator settings (tool servers, backend tools): read them again. */
  settingsChanged: () => void;
  logger?: Logger | undefined;
}

export class Cluster {
  readonly list: ClusterList;
  private readonly steps: ClusterPool;
  private readonly toolCalls: ClusterPool;
  private readonly client: PeerClient;
  private readonly stepBoard: WorkBoard;
  private readonly toolBoard: WorkBoard;
  private readonly listener: Listener;

  constructor(private readonly deps: ClusterDeps) {
    const { ownership, database, logger } = deps;
    const peers = () => ownership.peers();
    this.client = new PeerClient(ownership.instanceId);
    const board = (channel: string, hasParked: () => boolean): WorkBoard =>
      new WorkBoard({ instanceId: ownership.instanceId, hasParked, notify: (payload) => database.notify(channel, payload), logger });
    this.stepBoard = board(WORK_CHANNEL, () => deps.oldestParkedAt(undefined) !== undefined);
    this.toolBoard = board(TOOL_WORK_CHANNEL, () => deps.tools.oldestWaiting({}) !== undefined);
    this.listener = database.listen({
      channels: [WORK_CHANNEL, TOOL_WORK_CHANNEL, SETTINGS_CHANGED],
      onNotify: (channel, payload) => {
        if (channel === WORK_CHANNEL) this.stepBoard.heard(payload);
        else if (channel === TOOL_WORK_CHANNEL) this.toolBoard.heard(payload);
        else deps.settingsChanged();
      },
      // News sent while disconnected is lost: waiting claims look again when work is announced
      // again; settings are read again now.
      onConnected: () => deps.settingsChanged(),
      logger,
    });
    this.list = new ClusterList({ local: deps.listHere, peers, client: this.client, logger });
    this.steps = new ClusterPool({ peers, client: this.client, board: this.stepBoard, logger });
    this.toolCalls = new ClusterPool({ peers, client: this.client, board: this.toolBoard, logger });
  }

  /** The step pool's claim of any forest. */
  claimStep(waitMs: number, tenantId: string | undefined, signal: AbortSignal | undefined, since: string | undefined, caller: Caller): Promise<Claimed<LocalClaim> | null> {
    // A peer asked with a tenant's key answers, and hands out, that tenant's steps alone.
    const query = {
      claimHere: (wait: number, stop: AbortSignal | undefined) => this.deps.claimHere(wait, tenantId, stop, since),
      oldestHere: () => this.deps.oldestParkedAt(tenantId),
      state: { method: 'GET' as const, path: '/v1/cluster/pool' },
      claim: { path: '/v1/steps/next', body: since === undefined ? { waitMs: 0 } : { waitMs: 0, since } },
    };
    return this.steps.claim(query, waitMs, signal, caller);
  }

  /** The tool worker pool's claim, of the calls `filter` matches. */
  claimToolCall(filter: PoolFilter, waitMs: number, signal: AbortSignal | undefined, caller: Caller): Promise<Claimed<PoolToolCall> | null> {
    const { tools } = this.deps;
    const query = {
      claimHere: (wait: number, stop: AbortSignal | undefined) => tools.claim(filter, wait, stop),
      oldestHere: () => tools.oldestWaiting(filter),
      state: { method: 'POST' as const, path: '/v1/cluster/tool-pool', body: filter },
      claim: { path: '/v1/tool-calls/next', body: { ...filter, waitMs: 0 } },
    };
    return this.toolCalls.claim(query, waitMs, signal, caller);
  }

  /** A step was parked here with nobody here waiting for it: another instance's pool may claim it. */
  parked(): void {
    this.stepBoard.parked();
  }

  /** A tool call was offered here with no worker here waiting for it. */
  toolCallWaiting(): void {
    this.toolBoard.parked();
  }

  /** What this instance's step pool holds, for another instance's claim (`GET /v1/cluster/pool`). */
  poolState(tenantId: string | undefined): PoolState {
    return { oldestParkedAt: this.deps.oldestParkedAt(tenantId) ?? null };
  }

  /** What this instance's tool worker pool holds for `filter` (`POST /v1/cluster/tool-pool`). */
  toolPoolState(filter: PoolFilter): PoolState {
    return { oldestParkedAt: this.deps.tools.oldestWaiting(filter) ?? null };
  }

  async start(): Promise<void> {
    await this.listener.start();
    this.stepBoard.start();
    this.toolBoard.start();
  }

  async stop(): Promise<void> {
    this.stepBoard.stop();
    this.toolBoard.stop();
    await this.listener.stop();
    await this.client.close();
  }
}
