/**
 * PostgreSQL session store (node-postgres), selected by AGENTFOREST_DATABASE_URL: the same
 * contract as the SQLite store, for several instances on one database. A batch is one
 * transaction (postgres-writes.ts); `last_seq` is advanced with a compare-and-set, so a gap or
 * a duplicate seq aborts the whole batch, and a forest position may be taken once (unique
 * index). A write resolves after COMMIT, which with PostgreSQL's default
 * `synchronous_commit = on` means the WAL is flushed: acknowledged means durable, as with
 * SQLite's FULL. Forest leases, and the fence they put on every write (a lost forest's rows are
 * left out, the rest commits), are in postgres-leases.ts; the cluster's package configuration,
 * and the fence it puts on a write delivering a report, in postgres-packages.ts.
 *
 * Bodies are kept as JSON text, as the other stores keep them, so what a reader gets back is
 * byte for byte what was written.
 */
import pg from 'pg';
import { redactUrl } from '../../domain/store-settings.js';
import type { EntryBody, SessionEntry, SessionHeader } from '../../domain/session.js';
import type { Message } from '../../domain/message.js';
import {
  locationFromEntries,
  locationFromPending,
  type ActivationMark,
  type CompactionEntry,
  type BatchEntry,
  type IdempotencyRecord,
  type ListPosition,
  type MessageLocation,
  type PendingKind,
  type PendingRow,
  type SessionStore,
  type SessionSummary,
  type StoredRoot,
  type TurnBoundary,
  type WriteBatch,
  type WriteOutcome,
} from '../../sessions/session-store.js';
import { encodeRows } from '../batch-rows.js';
import { ForestLeases } from './postgres-leases.js';
import { POSTGRES_LATEST_VERSION, POSTGRES_MIGRATIONS } from './postgres-migrations.js';
import { PostgresPackages } from './postgres-packages.js';
import { Notifications } from './postgres-notifications.js';
import type { ClusterDatabase, ClusterFences, Listener, ListenOptions } from '../../cluster/cluster-database.js';
import { postgresUnavailable } from './postgres-outages.js';
import { inTransaction } from './postgres-transactions.js';
import { writeRows } from './postgres-writes.js';
import { PostgresApprovals } from './postgres-approvals.js';
import { PostgresSettings } from './postgres-settings.js';
import { PostgresProviderLimits, PostgresTenantUsage } from './postgres-usage.js';
import { PostgresWebhooks } from './postgres-webhooks.js';
import { storedRootOf, type RootRow } from '../root-rows.js';

export interface PostgresStoreOptions {
  url: string;
  /** Connections in the pool (default 10). */
  poolSize?: number;
  /** With several instances: the leases and the package version every write is checked against. */
  fences?: ClusterFences | undefined;
}

interface PendingDbRow {
  session_id?: string;
  position: string;
  kind: string;
  item_id: string | null;
  message: string;
  accepted_at: string;
}

/** How long a query waits for a connection to the server before it fails. */
const CONNECT_TIMEOUT_MS = 5_000;

/** Serialises the migrations of instances starting together (any fixed 64-bit key). */
const MIGRATION_LOCK = 7_361_402_113;

export class PostgresSessionStore implements SessionStore, ClusterDatabase {
  readonly kind = 'postgres' as const;
  /** The forests' leases on this database, which also fence this store's writes. */
  readonly leases: ForestLeases;
  /** The cluster's package configuration, which also fences this store's report writes. */
  readonly packages: PostgresPackages;
  readonly webhooks: PostgresWebhooks;
  readonly settings: PostgresSettings;
  readonly tenantUsage: PostgresTenantUsage;
  readonly providerLimits: PostgresProviderLimits;
  readonly approvals: PostgresApprovals;
  /** The one LISTEN connection every listener of this store shares. */
  private readonly notifications: Notifications;

  /** `url` is kept for the connection of its own that LISTENs. */
  private constructor(private readonly pool: pg.Pool, url: string, fences: ClusterFences | undefined) {
    this.notifications = new Notifications(url);
    this.leases = new ForestLeases(pool, fences?.leases);
    this.webhooks = new PostgresWebhooks(pool);
    this.settings = new PostgresSettings(pool);
    this.tenantUsage = new PostgresTenantUsage(pool);
    this.providerLimits = new PostgresProviderLimits(pool);
    this.approvals = new PostgresApprovals(pool);
    this.packages = new PostgresPackages(pool, fences?.packages);
  }

  /** Connect and migrate; refuses a database whose schema is newer than this build. */
  static async open(options: PostgresStoreOptions): Promise<PostgresSessionStore> {
    // A server that does not answer fails a query after CONNECT_TIMEOUT_MS instead of holding it forever.
    const pool = new pg.Pool({ connectionString: options.url, max: options.poolSize ?? 10, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
    // An idle client that loses its server must not crash the process: the next query fails instead.
    pool.on('error', () => undefined);
    try {
      await migrate(pool);
    } catch (error) {
      await pool.end();
      const reason = error instanceof Error ? error.message : String(error);
      throw new Error(`cannot open the session store at ${redactUrl(options.url)}: ${reason}`, { cause: error });
    }
    return new PostgresSessionStore(pool, options.url, options.fences);
  }

  /** A LISTEN on the store's one LISTEN connection (opened while any listener runs). */
  listen(options: ListenOptions): Listener {
    return this.notifications.listen(options);
  }

  /** NOTIFY `channel` (the LISTENing connections of every instance hear it). */
  async notify(channel: string, payload: string): Promise<void> {
    await this.pool.query('SELECT pg_notify($1, $2)', [channel, payload]);
  }

  /**
   * One transaction; the rows of forests this instance no longer holds are left out (WriteOutcome).
   * Rows derived from entries (the approvals index) come from the admitted batch's entries, so
   * they are left out with their forest.
   */
  async write(batch: WriteBatch): Promise<WriteOutcome | void> {
    const rows = encodeRows(batch);
    return inTransaction(this.pool, async (client) => {
      const admitted = await this.leases.admitWrite(client, batch);
      const reports = await this.packages.admitReports(client, admitted.batch);
      const refused = [...admitted.refused, ...reports.refused];
      await writeRows(client, refused.length === 0 ? rows : encodeRows(reports.batch));
      return refused.length === 0 ? undefined : { refused };
    });
  }

  async header(id: string): Promise<SessionSummary | undefined> {
    const { rows } = await this.pool.query<{ header: string; last_seq: string }>('SELECT header, last_seq FROM sessions WHERE id = $1', [id]);
    const row = rows[0];
    return row === undefined ? undefined : { header: JSON.parse(row.header) as SessionHeader, lastSeq: Number(row.last_seq) };
  }

  async read(id: string, after: number, limit?: number): Promise<SessionEntry[]> {
    const { rows } = await this.pool.query<{ seq: string; body: string }>(
      'SELECT seq, body FROM entries WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3',
      [id, after, limit ?? null],
    );
    return rows.map((row) => ({ seq: Number(row.seq), ...(JSON.parse(row.body) as EntryBody) }) as SessionEntry);
  }

  async lastTurnBoundary(id: string): Promise<TurnBoundary | undefined> {
    const { rows } = await this.pool.query<{ seq: string; body: string }>(
      `SELECT seq, body FROM entries WHERE session_id = $1 AND type IN ('turn-start', 'turn-end') ORDER BY seq DESC LIMIT 1`,
      [id],
    );
    const row = rows[0];
    if (row === undefined) return undefined;
    const entry = JSON.parse(row.body) as EntryBody;
    if (entry.type !== 'turn-start' && entry.type !== 'turn-end') return undefined;
    return { type: entry.type, turnId: entry.turnId, seq: Number(row.seq) };
  }

  async lastCompaction(id: string, atOrBefore: number): Promise<CompactionEntry | undefined> {
    const { rows } = await this.pool.query<{ seq: string; body: string }>(
      `SELECT seq, body FROM entries WHERE session_id = $1 AND type = 'compaction' AND seq <= $2 ORDER BY seq DESC LIMIT 1`,
      [id, atOrBefore],
    );
    const row = rows[0];
    if (row === undefined) return undefined;
    const entry = { seq: Number(row.seq), ...(JSON.parse(row.body) as EntryBody) } as SessionEntry;
    return entry.type === 'compaction' ? entry : undefined;
  }

  async lastActivation(id: string): Promise<ActivationMark | undefined> {
    const { rows } = await this.pool.query<{ seq: string; body: string }>(
      `SELECT seq, body FROM entries WHERE session_id = $1 AND type = 'activation' ORDER BY seq DESC LIMIT 1`,
      [id],
    );
    const row = rows[0];
    if (row === undefined) return undefined;
    const entry = JSON.parse(row.body) as EntryBody;
    return entry.type === 'activation' ? { event: entry.event, seq: Number(row.seq) } : undefined;
  }

  async children(parentId: string): Promise<SessionSummary[]> {
    const { rows } = await this.pool.query<{ header: string; last_seq: string }>(
      'SELECT header, last_seq FROM sessions WHERE parent_session = $1 ORDER BY created_at, id',
      [parentId],
    );
    return rows.map((row) => ({ header: JSON.parse(row.header) as SessionHeader, lastSeq: Number(row.last_seq) }));
  }

  /**
   * In byte order (COLLATE "C"), as the other stores and the live list order ids, whatever the
   * database's collation; the partial index sessions_roots serves the page in that order.
   */
  async roots(after: ListPosition | undefined, limit: number): Promise<StoredRoot[]> {
    const { rows } = await this.pool.query<RootRow>(
      `SELECT s.id, s.created_at, (s.header::jsonb)->>'label' AS label, (s.header::jsonb)->>'tenantId' AS tenant_id,
         (SELECT (e.body::jsonb)->>'at' FROM entries e WHERE e.session_id = s.id AND e.seq = s.last_seq) AS last_entry_at,
         (SELECT b.type FROM entries b WHERE b.session_id = s.id AND b.type IN ('turn-start', 'turn-end') ORDER BY b.seq DESC LIMIT 1) AS boundary
       FROM sessions s
       WHERE s.parent_session IS NULL AND (s.created_at COLLATE "C", s.id COLLATE "C") > ($1 COLLATE "C", $2 COLLATE "C")
       ORDER BY s.created_at COLLATE "C", s.id COLLATE "C" LIMIT $3`,
      // '' sorts before every creation time: no position is the start of the list.
      [after?.createdAt ?? '', after?.id ?? '', limit],
    );
    return rows.map(storedRootOf);
  }

  async readForest(rootId: string, after: number, limit: number): Promise<BatchEntry[]> {
    const { rows } = await this.pool.query<{ session_id: string; seq: string; body: string; forest_seq: string }>(
      'SELECT session_id, seq, body, forest_seq FROM entries WHERE root_id = $1 AND forest_seq > $2 ORDER BY forest_seq LIMIT $3',
      [rootId, after, limit],
    );
    return rows.map((row) => ({
      sessionId: row.session_id,
      entry: { seq: Number(row.seq), ...(JSON.parse(row.body) as EntryBody) } as SessionEntry,
      rootId,
      forestSeq: Number(row.forest_seq),
    }));
  }

  async lastForestSeq(rootId: string): Promise<number> {
    const { rows } = await this.pool.query<{ n: string | null }>('SELECT max(forest_seq) AS n FROM entries WHERE root_id = $1', [rootId]);
    return Number(rows[0]?.n ?? 0);
  }

  async pending(id: string): Promise<PendingRow[]> {
    const { rows } = await this.pool.query<PendingDbRow>(
      'SELECT position, kind, item_id, message, accepted_at FROM pending WHERE session_id = $1 ORDER BY position',
      [id],
    );
    return rows.map(rowToPending);
  }

  async locate(messageId: string): Promise<MessageLocation | undefined> {
    const pending = await this.pool.query<PendingDbRow & { session_id: string }>(
      'SELECT session_id, position, kind, item_id, message, accepted_at FROM pending WHERE message_id = $1 LIMIT 1',
      [messageId],
    );
    const row = pending.rows[0];
    if (row !== undefined) return locationFromPending(row.session_id, rowToPending(row));
    const { rows } = await this.pool.query<{ session_id: string; seq: string; body: string }>(
      'SELECT session_id, seq, body FROM entries WHERE message_id = $1 ORDER BY seq',
      [messageId],
    );
    const first = rows[0];
    if (first === undefined) return undefined;
    const entries = rows
      .filter((r) => r.session_id === first.session_id)
      .map((r) => ({ seq: Number(r.seq), ...(JSON.parse(r.body) as EntryBody) }) as SessionEntry);
    const turnStart = entries.find((e) => e.type === 'turn-start');
    let turnEnd: SessionEntry | undefined;
    if (turnStart?.type === 'turn-start') {
      const end = await this.pool.query<{ seq: string; body: string }>(
        `SELECT seq, body FROM entries WHERE session_id = $1 AND turn_id = $2 AND type = 'turn-end' LIMIT 1`,
        [first.session_id, turnStart.turnId],
      );
      const e = end.rows[0];
      if (e !== undefined) turnEnd = { seq: Number(e.seq), ...(JSON.parse(e.body) as EntryBody) } as SessionEntry;
    }
    return locationFromEntries(messageId, first.session_id, entries, turnEnd);
  }

  async idempotency(sender: string, key: string, now: number): Promise<IdempotencyRecord | undefined> {
    const { rows } = await this.pool.query<{ fingerprint: string; status: number; response: string; created_at: string; expires_at: string }>(
      'SELECT fingerprint, status, response, created_at, expires_at FROM idempotency WHERE sender = $1 AND key = $2 AND expires_at > $3',
      [sender, key, now],
    );
    const row = rows[0];
    if (row === undefined) return undefined;
    return {
      sender,
      key,
      fingerprint: row.fingerprint,
      status: row.status,
      response: JSON.parse(row.response) as unknown,
      createdAt: Number(row.created_at),
      expiresAt: Number(row.expires_at),
    };
  }

  async expireIdempotency(now: number): Promise<number> {
    const result = await this.pool.query('DELETE FROM idempotency WHERE expires_at <= $1', [now]);
    return result.rowCount ?? 0;
  }

  async ping(): Promise<void> {
    await this.pool.query('SELECT 1');
  }

  isUnavailable(error: unknown): boolean {
    return postgresUnavailable(error);
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

function rowToPending(row: PendingDbRow): PendingRow {
  return {
    kind: row.kind as PendingKind,
    position: Number(row.position),
    itemId: row.item_id,
    message: JSON.parse(row.message) as Message,
    acceptedAt: row.accepted_at,
  };
}

async function migrate(pool: pg.Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    try {
      await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)');
      const { rows } = await client.query<{ v: number | null }>('SELECT max(version) AS v FROM schema_migrations');
      const current = rows[0]?.v ?? 0;
      if (current > POSTGRES_LATEST_VERSION) {
        throw new Error(`database schema version ${current} is newer than this build supports (${POSTGRES_LATEST_VERSION}); refusing to start`);
      }
      for (const migration of POSTGRES_MIGRATIONS) {
        if (migration.version <= current) continue;
        await client.query('BEGIN');
        try {
          await client.query(migration.sql);
          await client.query('INSERT INTO schema_migrations (version, description, applied_at) VALUES ($1, $2, $3)', [
            migration.version,
            migration.description,
            new Date().toISOString(),
          ]);
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK');
          throw error;
        }
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]);
    }
  } finally {
    client.release();
  }
}
