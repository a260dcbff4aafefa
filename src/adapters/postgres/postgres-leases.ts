/**
 * Forest leases and write fencing on the PostgreSQL database (table `forest_leases`): which
 * instance owns a forest, until when, and at which epoch. src/cluster/ownership.ts decides when
 * to take, renew and give up a lease; this module is how, in SQL.
 *
 * Invariants: at most one unexpired lease per forest; a lease changes hands only once it has
 * expired, and every change of hands (or retake) raises the forest's epoch, which never goes
 * back (a released lease keeps its row, expired). With a fence set, a write commits a forest's
 * rows only if this instance holds that forest at the epoch it was granted; the rows of every
 * other forest it touches are left out (nothing of them lands), the rest commits, and the
 * store names the refused forests.
 */
import type pg from 'pg';
import { forestsOf, unattributedSessions, withoutForests } from '../../sessions/batch-forests.js';
import type { WriteBatch } from '../../sessions/session-store.js';
import type { LeaseHolder, LeaseResult, LeaseTable, WriteFence } from '../../cluster/cluster-database.js';

/** What a fenced write may commit: the batch without the refused forests' rows. */
export interface AdmittedWrite {
  batch: WriteBatch;
  /** Forests the batch touches that this instance does not hold at its epoch. */
  refused: string[];
}

export class ForestLeases implements LeaseTable {
  constructor(
    private readonly pool: pg.Pool,
    /** When given, a batch commits the rows of a forest only if this instance holds it, at its epoch. */
    private readonly fence: WriteFence | undefined,
  ) {}

  /**
   * Take a forest's lease for `ms`: free, expired or already ours. A takeover (or a retake)
   * raises the epoch, which fences every write of the previous holder from then on.
   */
  async acquire(rootId: string, owner: string, ownerUrl: string, ms: number): Promise<LeaseResult> {
    const { rows } = await this.pool.query<{ epoch: string }>(
      `INSERT INTO forest_leases (root_id, owner, owner_url, epoch, expires_at) VALUES ($1, $2, $3, 1, now() + $4 * interval '1 millisecond')
       ON CONFLICT (root_id) DO UPDATE SET owner = excluded.owner, owner_url = excluded.owner_url,
         epoch = forest_leases.epoch + 1, expires_at = excluded.expires_at
       WHERE forest_leases.expires_at < now() OR forest_leases.owner = excluded.owner
       RETURNING epoch`,
      [rootId, owner, ownerUrl, ms],
    );
    const row = rows[0];
    if (row !== undefined) return { owned: true, epoch: Number(row.epoch) };
    const holder = await this.holder(rootId);
    if (holder === undefined) return this.acquire(rootId, owner, ownerUrl, ms); // it expired meanwhile
    return { owned: false, ownerUrl: holder.ownerUrl };
  }

  /** Extend the leases held at these epochs; returns the roots whose lease was lost. */
  async renew(owner: string, epochs: ReadonlyMap<string, number>, ms: number): Promise<string[]> {
    const roots = [...epochs.keys()];
    if (roots.length === 0) return [];
    const { rows } = await this.pool.query<{ root_id: string }>(
      `UPDATE forest_leases l SET expires_at = now() + $4 * interval '1 millisecond'
       FROM unnest($1::text[], $2::bigint[]) AS h(root_id, epoch)
       WHERE l.root_id = h.root_id AND l.epoch = h.epoch AND l.owner = $3
       RETURNING l.root_id`,
      [roots, roots.map((r) => epochs.get(r)!), owner, ms],
    );
    const kept = new Set(rows.map((r) => r.root_id));
    return roots.filter((r) => !kept.has(r));
  }

  /**
   * Give a lease up (a disposed forest, or a graceful stop), if still held at this epoch. The
   * row stays, expired, so the next owner's epoch is still higher: epochs never repeat.
   */
  async release(rootId: string, owner: string, epoch: number): Promise<void> {
    await this.pool.query(
      // The owner is cleared too, so a renewal racing this release cannot extend it again.
      `UPDATE forest_leases SET expires_at = now() - interval '1 millisecond', owner = '' WHERE root_id = $1 AND owner = $2 AND epoch = $3`,
      [rootId, owner, epoch],
    );
  }

  /** Who holds an unexpired lease on a forest, if anyone. */
  async holder(rootId: string): Promise<LeaseHolder | undefined> {
    const { rows } = await this.pool.query<{ owner: string; owner_url: string; epoch: string; expires_in_ms: number }>(
      `SELECT owner, owner_url, epoch, ceil(extract(epoch FROM expires_at - now()) * 1000)::int AS expires_in_ms
       FROM forest_leases WHERE root_id = $1 AND expires_at > now()`,
      [rootId],
    );
    const row = rows[0];
    return row === undefined ? undefined : { owner: row.owner, ownerUrl: row.owner_url, epoch: Number(row.epoch), expiresInMs: row.expires_in_ms };
  }

  /** Of these forests, the ones another owner holds an unexpired lease on. */
  async heldByOthers(rootIds: readonly string[], owner: string): Promise<string[]> {
    const { rows } = await this.pool.query<{ root_id: string }>(
      'SELECT root_id FROM forest_leases WHERE root_id = ANY($1::text[]) AND expires_at > now() AND owner <> $2',
      [rootIds, owner],
    );
    return rows.map((r) => r.root_id);
  }

  /** The other instances that hold an unexpired lease now: the ones with live agents. */
  async otherHolders(owner: string): Promise<{ owner: string; ownerUrl: string }[]> {
    const { rows } = await this.pool.query<{ owner: string; owner_url: string }>(
      `SELECT DISTINCT ON (owner) owner, owner_url FROM forest_leases WHERE expires_at > now() AND owner <> $1 ORDER BY owner, expires_at DESC`,
      [owner],
    );
    return rows.map((r) => ({ owner: r.owner, ownerUrl: r.owner_url }));
  }

  /**
   * Inside a write's transaction: the part of the batch this instance may write. With a fence
   * set, every forest the batch touches must be leased to this instance at the epoch it holds;
   * the rows of the others are left out. The lease rows are locked (FOR SHARE) until the
   * commit, so a takeover waits for this write or this write sees the takeover: a paused old
   * owner cannot commit after losing its lease.
   */
  async admitWrite(client: pg.PoolClient, batch: WriteBatch): Promise<AdmittedWrite> {
    const fence = this.fence;
    if (fence === undefined) return { batch, refused: [] };
    const looked = new Map<string, string>();
    const unattributed = unattributedSessions(batch);
    if (unattributed.length > 0) {
      const { rows } = await client.query<{ id: string; root: string }>(
        `SELECT id, coalesce((header::jsonb)->>'rootSession', id) AS root FROM sessions WHERE id = ANY($1::text[])`,
        [unattributed],
      );
      for (const row of rows) looked.set(row.id, row.root);
    }
    const rootOf = (id: string): string | undefined => looked.get(id);
    const roots = forestsOf(batch, rootOf);
    if (roots.size === 0) return { batch, refused: [] };
    const { rows } = await client.query<{ root_id: string; owner: string; epoch: string }>(
      'SELECT root_id, owner, epoch FROM forest_leases WHERE root_id = ANY($1::text[]) FOR SHARE',
      [[...roots]],
    );
    const held = new Map(rows.map((r) => [r.root_id, r]));
    const refused = [...roots].filter((root) => {
      const row = held.get(root);
      return row === undefined || row.owner !== fence.owner || Number(row.epoch) !== fence.epochs.get(root);
    });
    if (refused.length === 0) return { batch, refused };
    return { batch: withoutForests(batch, new Set(refused), rootOf), refused };
  }
}
