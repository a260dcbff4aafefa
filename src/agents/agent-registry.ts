/**
 * The live registry: at most one LiveAgent per id, plus ids reserved by creations and resumes
 * in flight (so concurrent requests for one id conflict before any await), and the live
 * children of each live agent. Registry presence is what "live" means.
 *
 * Entering and leaving are announced (RegistryHooks) after the registry's own maps changed, so
 * whoever is told sees the registry as it now is.
 */
import { ServiceError } from '../domain/errors.js';
import { DEFAULT_LIMITS, type Limits } from './limits.js';
import type { LiveAgent } from './live-agent.js';

/** Told when an agent enters or leaves the live registry. */
export interface RegistryHooks {
  added?(agent: LiveAgent): void;
  left?(agent: LiveAgent): void;
}

export class AgentRegistry {
  private readonly live = new Map<string, LiveAgent>();
  private readonly reserved = new Set<string>();
  private readonly childrenOf = new Map<string, Set<string>>();
  /**
   * The live agents of each forest, by root id: the agent itself while it is the only one (a
   * lone root, the most common forest, then costs no set of its own), else a set.
   */
  private readonly forests = new Map<string, LiveAgent | Set<LiveAgent>>();

  constructor(
    private readonly limits: Pick<Limits, 'liveAgents' | 'childrenPerParent'> = DEFAULT_LIMITS,
    /** Where entering and leaving are announced (event streams, forest leases). */
    private readonly hooks: RegistryHooks = {},
  ) {}

  get size(): number {
    return this.live.size;
  }

  get(id: string): LiveAgent | undefined {
    return this.live.get(id);
  }

  values(): IterableIterator<LiveAgent> {
    return this.live.values();
  }

  /** Claim an id for a creation or resume; AGENT_EXISTS if live or already claimed, AT_CAPACITY when full. */
  reserve(id: string): void {
    if (this.live.has(id) || this.reserved.has(id)) {
      throw new ServiceError('AGENT_EXISTS', `agent "${id}" is already live`);
    }
    this.checkRoom();
    this.reserved.add(id);
  }

  /**
   * Throws unless one more agent fits: AT_CAPACITY when the process holds its limit of live
   * agents; LIMIT_EXCEEDED when `parentId` already has its limit of live children.
   */
  checkRoom(parentId?: string): void {
    const used = this.live.size + this.reserved.size;
    if (used >= this.limits.liveAgents) {
      throw new ServiceError('AT_CAPACITY', `this instance holds its limit of ${this.limits.liveAgents} live agents; retry later or on another instance`);
    }
    if (parentId === undefined) return;
    const children = this.childrenOf.get(parentId)?.size ?? 0;
    if (children >= this.limits.childrenPerParent) {
      throw new ServiceError('LIMIT_EXCEEDED', `agent "${parentId}" already has ${children} live children, the limit; close or let one settle first`);
    }
  }

  unreserve(id: string): void {
    this.reserved.delete(id);
  }

  add(agent: LiveAgent): void {
    this.live.set(agent.id, agent);
    const forest = this.forests.get(agent.rootId);
    if (forest === undefined) this.forests.set(agent.rootId, agent);
    else if (forest instanceof Set) forest.add(agent);
    else this.forests.set(agent.rootId, new Set([forest, agent]));
    const parent = agent.header.parentSession;
    if (parent !== null) {
      let set = this.childrenOf.get(parent);
      if (set === undefined) {
        set = new Set();
        this.childrenOf.set(parent, set);
      }
      set.add(agent.id);
    }
    this.hooks.added?.(agent);
  }

  /** Remove exactly this incarnation (a newer one with the same id stays). */
  remove(agent: LiveAgent): void {
    if (this.live.get(agent.id) !== agent) return;
    this.live.delete(agent.id);
    const forest = this.forests.get(agent.rootId);
    if (forest === agent) this.forests.delete(agent.rootId);
    else if (forest instanceof Set) {
      forest.delete(agent);
      if (forest.size === 0) this.forests.delete(agent.rootId);
    }
    const parent = agent.header.parentSession;
    if (parent !== null) {
      const set = this.childrenOf.get(parent);
      set?.delete(agent.id);
      if (set?.size === 0) this.childrenOf.delete(parent);
    }
    this.hooks.left?.(agent);
  }

  /** How many agents of the forest rooted at `rootId` are live. */
  liveInForest(rootId: string): number {
    const forest = this.forests.get(rootId);
    return forest === undefined ? 0 : forest instanceof Set ? forest.size : 1;
  }

  /** The live agents of the forest rooted at `rootId`, without looking at any other forest. */
  forestMembers(rootId: string): LiveAgent[] {
    const forest = this.forests.get(rootId);
    return forest === undefined ? [] : forest instanceof Set ? [...forest] : [forest];
  }

  /** Whether an agent id has a live child (after every transition of a child: no list built). */
  hasLiveChildren(parentId: string): boolean {
    return this.childrenOf.has(parentId);
  }

  /** Live children of an agent id, in creation order. */
  liveChildren(parentId: string): LiveAgent[] {
    return [...(this.childrenOf.get(parentId) ?? [])].flatMap((id) => {
      const child = this.live.get(id);
      return child === undefined ? [] : [child];
    });
  }

  /** Live descendants, deepest first (the order in which to close them). */
  liveDescendantsChildFirst(parentId: string): LiveAgent[] {
    const out: LiveAgent[] = [];
    const visit = (id: string): void => {
      for (const child of this.liveChildren(id)) {
        visit(child.id);
        out.push(child);
      }
    };
    visit(parentId);
    return out;
  }
}
