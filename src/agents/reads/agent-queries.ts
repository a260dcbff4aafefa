/**
 * Read-only questions about agents: views (live, or from the durable sessions for a child
 * that is not resident), lists with cursor paging, session pages, and where a request for an
 * agent belongs when several instances share a database. Nothing here changes state.
 *
 * Lists are ordered by creation time, then id; a cursor is the (createdAt, id) of the last
 * item, so a page never repeats or skips an agent that existed when the first page was read.
 */
import type { AgentView, ChildListing, SessionPage } from '../../contract/index.js';
import { ServiceError } from '../../domain/errors.js';
import type { SessionHeader } from '../../domain/session.js';
import type { AgentRegistry } from '../agent-registry.js';
import type { Budgets } from '../../budgets/budgets.js';
import type { Activations } from '../../children/activations.js';
import type { LiveAgent } from '../live-agent.js';
import type { ForestOwner, ForestPlacement } from '../../topology/topology.js';
import type { SessionLog } from '../../sessions/session-log.js';
import { statusOf, storedChildView, viewOf } from './views.js';
import { compareOrder, decodeCursor, pageOf, type OrderKey } from './list-order.js';

export interface ListFilter {
  parentId?: string;
  status?: string;
  kind?: 'root' | 'child';
  /** Only this tenant's agents. */
  tenantId?: string;
  limit: number;
  cursor?: string;
}

export interface AgentQueriesDeps {
  registry: AgentRegistry;
  activations: Pick<Activations, 'of' | 'stateOf'>;
  log: SessionLog;
  /** Who holds each forest. */
  forests: ForestPlacement;
  /** Usage, budgets and pauses (budgets.ts). */
  budgets: Budgets;
  /** What holds a live agent's next step: a tenant's time quota, a provider's back-off. */
  waiting?: (agent: LiveAgent) => AgentView['waiting'];
}

export class AgentQueries {
  constructor(private readonly deps: AgentQueriesDeps) {}

  /** The view of a live agent: a quiescent Activation about to settle shows as waiting until it leaves the registry. */
  viewOfLive(agent: LiveAgent): AgentView {
    const activation = this.deps.activations.of(agent);
    const state = activation === undefined ? null : this.deps.activations.stateOf(activation);
    const budgets = this.deps.budgets;
    return viewOf(agent, state === null ? null : state === 'running' ? 'running' : 'waiting', budgets.figures(agent.id), budgets.pausedBy(agent), this.deps.waiting?.(agent));
  }

  /** The view of a live agent or of a child that is not resident; undefined for a root that is not live or an unknown id. */
  async viewIfKnown(id: string): Promise<AgentView | undefined> {
    const live = this.deps.registry.get(id);
    if (live !== undefined) return this.viewOfLive(live);
    const header = await this.storedHeader(id);
    return header === undefined || header.kind === 'root' ? undefined : this.storedViewOf(header);
  }

  async view(id: string): Promise<AgentView> {
    const live = this.deps.registry.get(id);
    if (live !== undefined) return this.viewOfLive(live);
    const header = await this.storedHeader(id);
    if (header === undefined || header.kind === 'root') throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" is not live`);
    return this.storedViewOf(header);
  }

  /**
   * Without `parentId`: the live agents. With it: every child of that parent, resident or
   * not (from the durable sessions). Ordered by creation time, then id.
   *
   * The live agents are filtered and ordered as they are, and only the page becomes views: a
   * view costs far more than a comparison, and a page is a small part of what may be live.
   */
  async list(filter: ListFilter): Promise<{ items: AgentView[]; nextCursor: string | null }> {
    const after = filter.cursor === undefined ? undefined : decodeCursor(filter.cursor);
    const keep = (key: OrderKey, kind: string, tenantId: string | undefined, status: () => string): boolean =>
      (filter.kind === undefined || kind === filter.kind) &&
      (filter.tenantId === undefined || tenantId === filter.tenantId) &&
      (after === undefined || compareOrder(key, after) > 0) &&
      (filter.status === undefined || status() === filter.status);
    if (filter.parentId !== undefined) {
      const views = (await this.childViews(filter.parentId)).filter((v) => keep(v, v.kind, v.tenantId, () => v.status)).sort(compareOrder);
      return pageOf(views, filter.limit, (v) => v);
    }
    // Mostly in creation order already, which the sort takes in about one pass.
    const paused = (a: LiveAgent): boolean => this.deps.budgets.pausedBy(a) !== undefined;
    const agents = [...this.deps.registry.values()].filter((a) => keep(a.header, a.header.kind, a.header.tenantId, () => statusOf(a, paused(a)))).sort((a, b) => compareOrder(a.header, b.header));
    return pageOf(agents, filter.limit, (a) => this.viewOfLive(a));
  }

  /**
   * list_agents: the caller's children except one-shot ones, or with `descendants` every
   * descendant but one-shot ones (and what lies below them), parents before their children.
   */
  async listChildren(agent: LiveAgent, scope: 'children' | 'descendants' = 'children'): Promise<ChildListing[]> {
    const out: ChildListing[] = [];
    const visit = async (parentId: string): Promise<void> => {
      for (const v of await this.childViews(parentId)) {
        if (v.mode === 'one-shot') continue;
        out.push({ kind: 'child', id: v.id, label: v.label ?? '', status: v.resident ? 'running' : 'complete', parentId, depth: v.depth });
        if (scope === 'descendants') await visit(v.id);
      }
    };
    await visit(agent.id);
    return out;
  }

  async sessionPage(id: string, after: number, limit: number): Promise<SessionPage> {
    const summary = await this.deps.log.summary(id);
    if (summary === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    const entries = await this.deps.log.store.read(id, after, limit);
    const last = entries[entries.length - 1];
    const more = last !== undefined && last.seq < summary.lastSeq;
    return { header: summary.header, entries, nextAfter: more ? last.seq : null };
  }

  /**
   * The instance that owns agent `id`'s forest when that is another instance (its lease), or
   * undefined when this instance may serve the request: the agent is live here, the forest is
   * unowned, or its owner's lease expired (resume it here).
   */
  async ownerElsewhere(id: string): Promise<ForestOwner | undefined> {
    if (this.deps.registry.get(id) !== undefined) return undefined;
    const header = (await this.deps.log.store.header(id))?.header;
    return this.deps.forests.ownerElsewhere(header?.rootSession ?? id);
  }

  /** The view of an agent from its durable session (a root's is shown as not resident). */
  async storedView(id: string): Promise<AgentView | undefined> {
    const header = await this.storedHeader(id);
    return header === undefined ? undefined : this.storedViewOf(header);
  }

  private async storedViewOf(header: SessionHeader): Promise<AgentView> {
    const id = header.id;
    const figures = await this.deps.budgets.storedFigures(header);
    if (header.kind === 'root') return { ...storedChildView(header, undefined, figures), kind: 'root' };
    return storedChildView(header, await this.deps.log.store.lastActivation(id), figures);
  }

  async storedHeader(id: string): Promise<SessionHeader | undefined> {
    return (await this.deps.log.summary(id))?.header;
  }

  private async childViews(parentId: string): Promise<AgentView[]> {
    await this.deps.log.settled();
    const children = await this.deps.log.store.children(parentId);
    const first = children[0]?.header;
    if (first === undefined) return [];
    // One forest: its accounts are held (read back, when they are not here) once for all of them.
    return this.deps.budgets.withForest(first.rootSession ?? first.id, () =>
      Promise.all(
        children.map(async ({ header }) => {
          const live = this.deps.registry.get(header.id);
          if (live !== undefined) return this.viewOfLive(live);
          return storedChildView(header, await this.deps.log.store.lastActivation(header.id), this.deps.budgets.figures(header.id));
        }),
      ),
    );
  }
}
