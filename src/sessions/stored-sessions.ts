/**
 * Writing to a session that is not resident (a settled child, a root not resumed since a
 * restart): there is no live incarnation and so no token; the operator's call appends one
 * entry under the lock a cold resume takes (a child's lock; a root: its id reserved, as a
 * resume reserves it), with the forest's lease when several instances share the database.
 *
 * Invariants: the agent is not live and its session not closed when the entry is appended;
 * the last checks and the append are one synchronous span; the entry is durable on return.
 */
import { ServiceError } from '../domain/errors.js';
import type { EntryBody, SessionEntry, SessionHeader } from '../domain/session.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { ChildLock } from '../children/child-lock.js';
import type { ForestPlacement } from '../topology/topology.js';
import type { SessionLog } from './session-log.js';

export interface StoredSessionsDeps {
  registry: AgentRegistry;
  log: SessionLog;
  /** The lock a child's cold resume and closing take. */
  lock: Pick<ChildLock, 'run'>;
  forests: ForestPlacement;
}

export class StoredSessions {
  constructor(private readonly deps: StoredSessionsDeps) {}

  /**
   * Append the entry `build` makes (it may read and refuse first) to `header`'s session.
   * `instead`: what to do when the agent became live meanwhile (`compact it`), for the error.
   */
  async append<B extends EntryBody>(header: SessionHeader, instead: string, build: (lastSeq: number) => Promise<B>): Promise<B & { seq: number }> {
    const id = header.id;
    const root = header.rootSession ?? id;
    return this.deps.forests.leased(root, async () => {
      const write = (): Promise<B & { seq: number }> => this.write(header, instead, build);
      const entry = header.kind === 'root' ? await this.underReservation(id, write) : await this.deps.lock.run(id, write);
      await this.deps.log.durable(root);
      return entry;
    });
  }

  private async underReservation<T>(id: string, critical: () => Promise<T>): Promise<T> {
    this.deps.registry.reserve(id); // AGENT_EXISTS while it is live or being resumed
    try {
      return await critical();
    } finally {
      this.deps.registry.unreserve(id);
    }
  }

  private async write<B extends EntryBody>(header: SessionHeader, instead: string, build: (lastSeq: number) => Promise<B>): Promise<B & { seq: number }> {
    const id = header.id;
    const root = header.rootSession ?? id;
    const becameLive = (): ServiceError => new ServiceError('UNAUTHORIZED', `agent "${id}" became live meanwhile; ${instead} with the token of its live incarnation`);
    if (this.deps.registry.get(id) !== undefined) throw becameLive();
    const mark = await this.deps.log.store.lastActivation(id);
    if (mark?.event === 'closed') throw new ServiceError('NOT_RESUMABLE', `agent "${id}" was closed; its session takes no more entries`);
    const lastSeq = (await this.deps.log.summary(id))?.lastSeq ?? 0;
    const body = await build(lastSeq);
    // The forest is loaded only to write, and again if a sibling's session closing forgot it
    // meanwhile: the checks and the opening are one synchronous span.
    while (!this.deps.log.forestLoaded(root)) await this.deps.log.loadForest(root);
    if (this.deps.registry.get(id) !== undefined) throw becameLive();
    this.deps.log.open(id, lastSeq, root);
    const entry: SessionEntry = this.deps.log.append(id, body);
    this.deps.log.release(id);
    return { ...body, seq: entry.seq };
  }
}
