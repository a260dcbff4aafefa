/**
 * The roots there are to resume (`GET /v1/agents?live=false`): durable roots that are not
 * live, exactly the ones `POST /v1/agents/{id}/resume` re-opens. A root stops being live when
 * its process stops or when it is disposed; either way its session stays and resume accepts it.
 *
 * "Not live" is this instance's registry; with several instances, also no other instance
 * holding the forest's lease (that instance runs it: a resume sent here would go there). A
 * root disposed there with `cascade=false` is left out until its last live child settles and
 * the lease is given up.
 *
 * The store reads roots a keyset page at a time in list order (creation time, then id); the
 * live ones are skipped and the next store page read until this page is full, so a page costs
 * about what it shows plus the live roots between its items. Cursors are the live list's.
 */
import type { AgentRegistry } from '../agent-registry.js';
import type { ForestPlacement } from '../../topology/topology.js';
import type { SessionLog } from '../../sessions/session-log.js';
import type { ListPosition, StoredRoot } from '../../sessions/session-store.js';
import { decodeCursor, pageOf } from './list-order.js';

export interface NotRunningDeps {
  registry: Pick<AgentRegistry, 'get'>;
  log: Pick<SessionLog, 'settled' | 'store'>;
  /** With several instances, a root another one holds is left out. */
  forests: Pick<ForestPlacement, 'heldElsewhere'>;
}

/** The most roots one store read asks for, however many live ones a page has to skip. */
const MAX_READ = 1_000;

export class NotRunningRoots {
  constructor(private readonly deps: NotRunningDeps) {}

  async list(page: { limit: number; cursor?: string; tenantId?: string }): Promise<{ items: StoredRoot[]; nextCursor: string | null }> {
    // Every acknowledged write is read: a root disposed a moment ago is listed.
    await this.deps.log.settled();
    const kept: StoredRoot[] = [];
    let after: ListPosition | undefined = page.cursor === undefined ? undefined : decodeCursor(page.cursor);
    // One more than the page, to know whether another follows.
    for (let want = page.limit + 1; ; want = Math.min(MAX_READ, want * 2)) {
      const read = await this.deps.log.store.roots(after, want);
      const elsewhere = await this.heldElsewhere(read);
      for (const root of read) {
        const theirs = page.tenantId === undefined || root.tenantId === page.tenantId;
        if (theirs && this.deps.registry.get(root.id) === undefined && !elsewhere.has(root.id)) kept.push(root);
        if (kept.length > page.limit) break;
      }
      after = read.at(-1);
      if (kept.length > page.limit || read.length < want) break;
    }
    return pageOf(kept, page.limit, (root) => root);
  }

  private async heldElsewhere(roots: readonly StoredRoot[]): Promise<ReadonlySet<string>> {
    if (roots.length === 0) return new Set();
    return this.deps.forests.heldElsewhere(roots.map((r) => r.id));
  }
}
