/**
 * The list of live agents across the cluster (`GET /v1/agents` without `parentId`): this
 * instance's page merged with the pages of every other instance that holds forests (the
 * database says which), each asked for the same filter and cursor. Each instance answers for
 * the agents it holds, so every status is the owner's own, live. Merging pages of `limit`
 * in the list order gives the cluster's page of `limit`; its cursor works on every instance.
 *
 * An instance that does not answer in time is left out of the page (its lease runs out, and its
 * forests are then not live anywhere), and the omission is logged.
 */
import type { Logger } from 'pino';
import type { ListFilter } from '../agents/reads/agent-queries.js';
import { compareOrder, encodeCursor } from '../agents/reads/list-order.js';
import type { AgentPage, Caller } from '../topology/topology.js';
import type { Peer, PeerClient } from './peers.js';

export interface ClusterListDeps {
  /** This instance's own page. */
  local: (filter: ListFilter) => Promise<AgentPage>;
  /** The other instances that hold forests now. */
  peers: () => Promise<Peer[]>;
  client: PeerClient;
  logger?: Logger | undefined;
}

const PEER_TIMEOUT_MS = 5_000;

export class ClusterList {
  constructor(private readonly deps: ClusterListDeps) {}

  async list(filter: Omit<ListFilter, 'parentId'>, caller: Caller): Promise<AgentPage> {
    const peers = await this.deps.peers().catch((err: unknown) => {
      this.deps.logger?.warn({ err }, 'the other instances could not be read from the database; this page holds this instance\'s agents only');
      return [];
    });
    const pages = await Promise.all([this.deps.local(filter), ...peers.map((peer) => this.peerPage(peer, filter, caller))]);
    // An agent whose forest moved while the pages were read may be in two of them: once is enough.
    const byId = new Map(pages.flatMap((page) => page?.items ?? []).map((item) => [item.id, item]));
    const items = [...byId.values()].sort(compareOrder);
    const page = items.slice(0, filter.limit);
    const last = page[page.length - 1];
    const more = items.length > filter.limit || pages.some((p) => p !== undefined && p.nextCursor !== null);
    return { items: page, nextCursor: more && last !== undefined ? encodeCursor(last) : null };
  }

  private async peerPage(peer: Peer, filter: Omit<ListFilter, 'parentId'>, caller: Caller): Promise<AgentPage | undefined> {
    const query = new URLSearchParams({ limit: String(filter.limit) });
    if (filter.status !== undefined) query.set('status', filter.status);
    if (filter.kind !== undefined) query.set('kind', filter.kind);
    if (filter.tenantId !== undefined) query.set('tenantId', filter.tenantId);
    if (filter.cursor !== undefined) query.set('cursor', filter.cursor);
    try {
      const answer = await this.deps.client.call(peer, { method: 'GET', path: `/v1/agents?${query.toString()}`, ...caller, timeoutMs: PEER_TIMEOUT_MS });
      if (answer.status === 200) return JSON.parse(answer.body.toString('utf8')) as AgentPage;
      this.deps.logger?.warn({ peer, status: answer.status }, 'an instance refused its part of the cluster list; its agents are not in this page');
    } catch (err) {
      this.deps.logger?.warn({ err, peer }, 'an instance did not answer its part of the cluster list; its agents are not in this page');
    }
    return undefined;
  }
}
