/**
 * What several instances on one PostgreSQL database answer together: the list of every live
 * agent (cluster-list.ts) and the worker pool of every forest (cluster-pool.ts), over calls
 * between instances (peers.ts) and the work board's news (work-board.ts), which arrives on a
 * LISTEN connection of its own. Built only with forest ownership; one instance alone has none
 * of it.
 */
import type { Logger } from 'pino';
import type { ListFilter } from '../agents/reads/agent-queries.js';
import type { AgentPage, LocalClaim, PoolState } from '../topology/topology.js';
import type { ClusterDatabase, Listener } from './cluster-database.js';
import { ClusterList } from './cluster-list.js';
import { ClusterPool } from './cluster-pool.js';
import type { ForestOwnership } from './ownership.js';
import { PeerClient } from './peers.js';
import { WORK_CHANNEL, WorkBoard } from './work-board.js';

export interface ClusterDeps {
  database: ClusterDatabase;
  ownership: Pick<ForestOwnership, 'instanceId' | 'peers'>;
  /** When this instance's oldest parked step was parked, if one is. */
  oldestParkedAt: () => number | undefined;
  /** This instance's own pool claim, of any forest. */
  claimHere: (waitMs: number, signal: AbortSignal | undefined, since: string | undefined) => Promise<LocalClaim | null>;
  /** This instance's own live list. */
  listHere: (filter: ListFilter) => Promise<AgentPage>;
  logger?: Logger | undefined;
}

export class Cluster {
  readonly list: ClusterList;
  readonly pool: ClusterPool;
  private readonly client: PeerClient;
  private readonly board: WorkBoard;
  private readonly listener: Listener;

  constructor(private readonly deps: ClusterDeps) {
    const { ownership, database, logger } = deps;
    const peers = () => ownership.peers();
    this.client = new PeerClient(ownership.instanceId);
    this.board = new WorkBoard({
      instanceId: ownership.instanceId,
      hasParked: () => deps.oldestParkedAt() !== undefined,
      notify: (payload) => database.notify(WORK_CHANNEL, payload),
      logger,
    });
    this.listener = database.listen({
      channels: [WORK_CHANNEL],
      onNotify: (_channel, payload) => this.board.heard(payload),
      // News sent while disconnected is lost; waiting claims look again when it repeats.
      onConnected: () => undefined,
      logger,
    });
    this.list = new ClusterList({ local: deps.listHere, peers, client: this.client, logger });
    this.pool = new ClusterPool({
      claimHere: deps.claimHere,
      oldestHere: deps.oldestParkedAt,
      peers,
      client: this.client,
      board: this.board,
      logger,
    });
  }

  /** A step was parked here with nobody here waiting for it: another instance's pool may claim it. */
  parked(): void {
    this.board.parked();
  }

  /** What this instance's pool holds, for another instance's claim (`GET /v1/cluster/pool`). */
  poolState(): PoolState {
    return { oldestParkedAt: this.deps.oldestParkedAt() ?? null };
  }

  async start(): Promise<void> {
    await this.listener.start();
    this.board.start();
  }

  async stop(): Promise<void> {
    this.board.stop();
    await this.listener.stop();
    await this.client.close();
  }
}
