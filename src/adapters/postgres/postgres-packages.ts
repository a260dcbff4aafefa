/**
 * The cluster's package configuration on the PostgreSQL database, in SQL: one row
 * (`cluster_packages`) with the state and its version, and one row per instance
 * (`cluster_instances`) with the version it applied. src/cluster/cluster-packages.ts
 * decides when to read, change and confirm; this module is how.
 *
 * Invariants: the version only grows, by one per change, and every change is one transaction
 * that locks the row (FOR UPDATE), so concurrent changes serialise and none is lost; a change
 * NOTIFYs PACKAGES_CHANGED at its commit, a confirmation NOTIFYs PACKAGES_APPLIED. The row also
 * keeps `report_fence`, the version of the last change that revoked `report`: with a fence set,
 * a write that delivers a report commits only if this instance applied that version (see
 * checkReports), so an instance that missed the revocation cannot serve `report`.
 */
import type pg from 'pg';
import { parsePackageState, revokesReport, type PackageState } from '../../domain/package-state.js';
import { withoutForests } from '../../sessions/batch-forests.js';
import type { WriteBatch } from '../../sessions/session-store.js';
import { inTransaction } from './postgres-transactions.js';
import { PACKAGES_APPLIED, PACKAGES_CHANGED, type PackageTable, type ReportFence, type StoredPackages, type UnconfirmedInstance } from '../../cluster/cluster-database.js';

export class PostgresPackages implements PackageTable {
  constructor(
    private readonly pool: pg.Pool,
    /** When given, a batch delivering a report commits only if this instance applied the last revocation. */
    private readonly fence: ReportFence | undefined,
  ) {}

  /**
   * The stored configuration, seeded with `initial` (version 1) when the database has none:
   * the first instance of a fresh database writes its own; every later one reads that.
   */
  async seed(initial: PackageState): Promise<StoredPackages> {
    await this.pool.query(
      `INSERT INTO cluster_packages (id, version, report_fence, state, changed_at) VALUES (1, 1, 0, $1, now()) ON CONFLICT (id) DO NOTHING`,
      [JSON.stringify(initial)],
    );
    return this.read();
  }

  async read(): Promise<StoredPackages> {
    const { rows } = await this.pool.query<{ version: string; report_fence: string; state: string }>(
      'SELECT version, report_fence, state FROM cluster_packages WHERE id = 1',
    );
    const row = rows[0];
    if (row === undefined) throw new Error('the package configuration has not been seeded');
    return { version: Number(row.version), reportFence: Number(row.report_fence), state: parsePackageState(JSON.parse(row.state)) };
  }

  /**
   * Change the configuration in one transaction: lock the row, compute the next state from the
   * stored one (`next` may throw, and nothing changes), write it under the next version and
   * NOTIFY at commit. Resolves with what was committed.
   */
  async change(next: (current: PackageState) => PackageState): Promise<StoredPackages> {
    return inTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ version: string; report_fence: string; state: string }>(
        'SELECT version, report_fence, state FROM cluster_packages WHERE id = 1 FOR UPDATE',
      );
      const row = rows[0];
      if (row === undefined) throw new Error('the package configuration has not been seeded');
      const current = parsePackageState(JSON.parse(row.state));
      const state = next(current);
      const version = Number(row.version) + 1;
      const reportFence = revokesReport(current, state) ? version : Number(row.report_fence);
      await client.query('UPDATE cluster_packages SET version = $1, report_fence = $2, state = $3, changed_at = now() WHERE id = 1', [
        version,
        reportFence,
        JSON.stringify(state),
      ]);
      await client.query('SELECT pg_notify($1, $2)', [PACKAGES_CHANGED, String(version)]);
      return { version, reportFence, state };
    });
  }

  /** Record that this instance applied `version` (never moving back) and NOTIFY the waiters. */
  async confirm(instanceId: string, url: string, version: number): Promise<void> {
    await inTransaction(this.pool, async (client) => {
      await client.query(
        `INSERT INTO cluster_instances (instance_id, url, applied_version, seen_at) VALUES ($1, $2, $3, now())
         ON CONFLICT (instance_id) DO UPDATE SET url = excluded.url, seen_at = excluded.seen_at,
           applied_version = greatest(cluster_instances.applied_version, excluded.applied_version)`,
        [instanceId, url, version],
      );
      await client.query('SELECT pg_notify($1, $2)', [PACKAGES_APPLIED, `${version}`]);
    });
  }

  /**
   * The instances other than `self` that hold an unexpired forest lease and have not applied
   * `version` (one never confirming anything counts too), with the URL their lease advertises.
   */
  async unconfirmed(self: string, version: number): Promise<UnconfirmedInstance[]> {
    const { rows } = await this.pool.query<{ owner: string; url: string }>(
      `SELECT l.owner, min(l.owner_url) AS url
       FROM forest_leases l LEFT JOIN cluster_instances i ON i.instance_id = l.owner
       WHERE l.expires_at > now() AND l.owner <> $1 AND l.owner <> ''
       GROUP BY l.owner
       HAVING coalesce(max(i.applied_version), 0) < $2
       ORDER BY l.owner`,
      [self, version],
    );
    return rows.map((r) => ({ instanceId: r.owner, url: r.url }));
  }

  /**
   * Inside a write's transaction, when a fence is set and the batch delivers a report: the
   * last revocation of `report` must be applied here, or the forests of those reports are
   * left out of the commit (refused, as a lost lease is) and the fence is told it is behind. The row is read FOR SHARE, so a
   * revocation committing meanwhile waits for this write (the report came first) or this write
   * sees it. A batch without a report costs nothing.
   */
  async admitReports(client: pg.PoolClient, batch: WriteBatch): Promise<{ batch: WriteBatch; refused: string[] }> {
    const fence = this.fence;
    if (fence === undefined) return { batch, refused: [] };
    const { roots, looked } = await reportRoots(client, batch);
    if (roots.length === 0) return { batch, refused: [] };
    const { rows } = await client.query<{ report_fence: string }>('SELECT report_fence FROM cluster_packages WHERE id = 1 FOR SHARE');
    const required = Number(rows[0]?.report_fence ?? 0);
    if (required <= fence.applied()) return { batch, refused: [] };
    fence.behind();
    return { batch: withoutForests(batch, new Set(roots), (id) => looked.get(id)), refused: roots };
  }
}

/**
 * The forests in which this batch delivers a report: a pending row put with a report (staged or
 * queued at the parent), or a report message logged without leaving a pending row in the same
 * batch (an inject into an idle parent). A report moving from a pending row into the log was
 * delivered earlier and does not count.
 */
async function reportRoots(client: pg.PoolClient, batch: WriteBatch): Promise<{ roots: string[]; looked: Map<string, string> }> {
  const looked = new Map<string, string>();
  const roots = new Set<string>();
  const lookup = new Set<string>();
  const moved = new Set<string>();
  for (const op of batch.pending ?? []) {
    if (op.op === 'delete') moved.add(op.messageId);
    else if (op.row.message.source.kind === 'subagent-report') {
      if (op.rootId === undefined) lookup.add(op.sessionId);
      else roots.add(op.rootId);
    }
  }
  for (const item of batch.entries) {
    const entry = item.entry;
    if (entry.type === 'message' && entry.source.kind === 'subagent-report' && !moved.has(entry.messageId)) roots.add(item.rootId);
  }
  for (const header of batch.headers) if (lookup.delete(header.id)) roots.add(header.rootSession ?? header.id);
  if (lookup.size > 0) {
    const { rows } = await client.query<{ id: string; root: string }>(
      `SELECT id, coalesce((header::jsonb)->>'rootSession', id) AS root FROM sessions WHERE id = ANY($1::text[])`,
      [[...lookup]],
    );
    for (const row of rows) {
      roots.add(row.root);
      looked.set(row.id, row.root);
    }
  }
  return { roots: [...roots], looked };
}
