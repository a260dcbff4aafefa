/**
 * What several instances on one PostgreSQL database answer together: the list of every live
 * agent (cluster-list.ts) and the worker pool of every forest (cluster-pool.ts), over calls
 * between instances (peers.ts) and the work board's news (work-board.ts), which arrives on a
 * LISTEN connection of its own. Built only with forest ownership; one instance alone has none
 * of it.
 */
import type { Logger } from 'pino';
import type { AgentQueries } from '../agents/reads/agent-queries.js';
import type { ForestOwnership } from './ownership.js';
import type { StepService } from '../steps/step-service.js';
import type { StepDispatcher } from '../steps/step-dispatcher.js';
import { NotificationListener } from '../adapters/postgres/postgres-notifications.js';
import type { PostgresSessionStore } from '../adapters/postgres/postgres-store.js';
import { ClusterList } from './cluster-list.js';
import { ClusterPool, type PoolState } from './cluster-pool.js';
import { PeerClient } from './peers.js';
import { WORK_CHANNEL, WorkBoard } from './work-board.js';

export interface ClusterDeps {
  ownership: ForestOwnership;
  store: PostgresSessionStore;
  dispatcher: Pick<StepDispatcher<never, unknown>, 'oldestParkedAt'> & { onParked: (() => void) | undefined };
  steps: Pick<StepService, 'claimAny'>;
  queries: Pick<AgentQueries, 'list'>;
  logger?: Logger | undefined;
}

export class Cluster {
  readonly list: ClusterList;
  readonly pool: ClusterPool;
  private readonly client: PeerClient;
  private readonly board: WorkBoard;
  private readonly listener: NotificationListener;

  constructor(private readonly deps: ClusterDeps) {
    const { ownership, store, dispatcher, logger } = deps;
    const peers = () => ownership.peers();
    this.client = new PeerClient(ownership.options.instanceId);
    this.board = new WorkBoard({
      instanceId: ownership.options.instanceId,
      hasParked: () => dispatcher.oldestParkedAt() !== undefined,
      notify: (payload) => store.notify(WORK_CHANNEL, payload),
      logger,
    });
    dispatcher.onParked = () => this.board.parked();
    this.listener = new NotificationListener({
      url: store.url,
      channels: [WORK_CHANNEL],
      onNotify: (_channel, payload) => this.board.heard(payload),
      // News sent while disconnected is lost; waiting claims look again when it repeats.
      onConnected: () => undefined,
      logger,
    });
    this.list = new ClusterList({ local: (filter) => deps.queries.list(filter), peers, client: this.client, logger });
    this.pool = new ClusterPool({
      claimHere: (waitMs, signal, since) => deps.steps.claimAny(waitMs, undefined, signal, since),
      oldestHere: () => dispatcher.oldestParkedAt(),
      peers,
      client: this.client,
      board: this.board,
      logger,
    });
  }

  /** What this instance's pool holds, for another instance's claim (`GET /v1/cluster/pool`). */
  poolState(): PoolState {
    return { oldestParkedAt: this.deps.dispatcher.oldestParkedAt() ?? null };
  }

  async start(): Promise<void> {
    await this.listener.start();
    this.board.start();
  }

  async stop(): Promise<void> {
    this.board.stop();
    this.deps.dispatcher.onParked = undefined;
    await this.listener.stop();
    await this.client.close();
  }
}
