/**
 * The write side of the SQLite store, shared by the writer thread and the inline writer: how
 * a connection is opened, how a `WriteBatch` is encoded into plain rows (JSON text included,
 * so it crosses a thread boundary as strings and numbers), and the one transaction that
 * applies a batch. A batch is all or nothing: `last_seq` is advanced with a compare-and-set,
 * so a gap or a duplicate seq aborts it whole, and a forest page may not reach back into
 * positions already stored.
 *
 * Entries are stored a commit's worth at a time (schema version 4): each session's run of
 * entries in one chunk row, and each forest's run of positions in one page row that names
 * its chunks. Only message ids, turn boundaries and activations get a row per entry, for
 * their lookups.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type { WriteBatch } from '../../sessions/session-store.js';
import { approvalWriter } from './sqlite-approvals.js';
import { settingWriter } from './sqlite-settings.js';
import { tenantUsageWriter } from './sqlite-tenant-usage.js';
import { providerLimitWriter } from './sqlite-provider-limits.js';
import { webhookWriter } from './sqlite-webhooks.js';
import { encodeRows, seqAdvances, type BatchRows, type EntryRow, type IdempotencyRow, type SessionRow } from '../batch-rows.js';

import type { SqliteSyncMode } from '../../domain/store-settings.js';
export { SQLITE_SYNC_MODES, type SqliteSyncMode } from '../../domain/store-settings.js';

/**
 * WAL pages after which a commit checkpoints them into the database file (SQLite's default is
 * 1,000, about 4 MiB). Appends dirty the same few tail pages of each B-tree over and over: a
 * checkpoint copies each page once however often it changed, so four times fewer checkpoints
 * copy far fewer pages (docs/performance.md has the measured effect). The WAL file grows to
 * about 16 MiB before it is reused.
 */
export const WAL_AUTOCHECKPOINT_PAGES = 4_000;

/**
 * The most the WAL file keeps of its size once a checkpoint has reset it: a WAL that grew
 * (a long read held a checkpoint back) shrinks back to this, so a small volume is not held by
 * space the store no longer needs. It equals what the autocheckpoint lets the WAL grow to.
 */
export const WAL_SIZE_LIMIT_BYTES = WAL_AUTOCHECKPOINT_PAGES * 4_096;

/** The settings a connection writes with. */
export interface WriterSettings {
  journalMode: string;
  /** SQLite's number for the synchronous level: 1 NORMAL, 2 FULL. */
  synchronous: number;
  /** WAL pages after which a commit checkpoints (see WAL_AUTOCHECKPOINT_PAGES). */
  autocheckpointPages: number;
  /** What the WAL file is truncated to after a checkpoint (see WAL_SIZE_LIMIT_BYTES). */
  walSizeLimitBytes: number;
}

export interface ConnectionOptions {
  path: string;
  synchronous: SqliteSyncMode;
}

/** Open a connection with the store's settings (WAL; FULL sync unless told otherwise). */
export function openConnection({ path, synchronous }: ConnectionOptions): Database.Database {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${synchronous}`);
    db.pragma(`wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}`);
    db.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT_BYTES}`);
    db.pragma('foreign_keys = ON');
    db.pragma('busy_timeout = 5000');
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}

/** A run of one session's entries, gap-free from `firstSeq`; `entries` is `[[forestSeq, body], ...]` as JSON. */
type ChunkRow = [sessionId: string, firstSeq: number, lastSeq: number, rootId: string, entries: string];
/** A run of a forest's positions and the chunks that hold them; `chunks` is `[[sessionId, firstSeq], ...]` as JSON. */
type PageRow = [rootId: string, firstForestSeq: number, lastForestSeq: number, chunks: string];
type MarkRow = [sessionId: string, seq: number, type: string, turnId: string | null, body: string];

/** A write batch as rows of primitives, ready for the statements below. */
export interface EncodedBatch extends Omit<BatchRows, 'entries'> {
  chunks: ChunkRow[];
  pages: PageRow[];
  /** A row per message id, `messageId, sessionId, seq`, flat: three values a row. */
  messageValues: (string | number)[];
  marks: MarkRow[];
}

/** What a batch's entries become: chunks, forest pages, and the lookup rows. */
export type EntryRows = Pick<EncodedBatch, 'chunks' | 'pages' | 'messageValues' | 'marks'>;

/**
 * A forest page holds at most this many consecutive positions of one forest, and each chunk
 * the part of them that is one session's. A read parses whole chunks, so this bounds what a
 * read of a few entries parses; a commit of more entries than this writes several pages.
 */
export const PAGE_ENTRIES = 256;

/** The entry types a lookup finds by session and seq, without reading chunks (see entry_marks). */
const MARKED_TYPES: ReadonlySet<string> = new Set(['turn-start', 'turn-end', 'activation', 'compaction']);

/**
 * Built field by field, and without the entry encoding when there are no entries (creating an
 * agent writes only its header): with object rest and spread here, 9,000 root creations left
 * the main isolate 2.5–5 MB more committed old space, about 400 B per agent of resident memory.
 */
export function encodeBatch(batch: WriteBatch): EncodedBatch {
  const rows = encodeRows(batch);
  const entries = rows.entries.length === 0 ? { chunks: [], pages: [], messageValues: [], marks: [] } : encodeEntries(rows.entries);
  return {
    sessions: rows.sessions,
    chunks: entries.chunks,
    pages: entries.pages,
    messageValues: entries.messageValues,
    marks: entries.marks,
    pending: rows.pending,
    idempotency: rows.idempotency,
    outbox: rows.outbox,
    webhooks: rows.webhooks,
    settings: rows.settings,
    tenantUsage: rows.tenantUsage,
    providerLimits: rows.providerLimits,
    approvals: rows.approvals,
  };
}

/**
 * Entries as the rows that store them: each forest's entries, in batch order, cut into pages
 * of PAGE_ENTRIES positions, and each page's entries of one session into one chunk. Besides,
 * a row per message id and per turn boundary or activation, for the lookups. Throws when a
 * forest's positions do not rise or a session's seqs leave a gap: chunks number their entries
 * from their first seq.
 */
export function encodeEntries(entries: readonly EntryRow[]): EntryRows {
  const encoded: EntryRows = { chunks: [], pages: [], messageValues: [], marks: [] };
  const byRoot = new Map<string, EntryRow[]>();
  for (const row of entries) {
    const forest = byRoot.get(row[6]);
    if (forest === undefined) byRoot.set(row[6], [row]);
    else forest.push(row);
  }
  for (const [rootId, forest] of byRoot) {
    for (let from = 0; from < forest.length; from += PAGE_ENTRIES) {
      const page = forest.slice(from, from + PAGE_ENTRIES);
      const chunks = new Map<string, { firstSeq: number; lastSeq: number; parts: string[] }>();
      let lastForestSeq = -Infinity;
      for (const [sessionId, seq, type, body, messageId, turnId, , forestSeq] of page) {
        if (forestSeq <= lastForestSeq) throw new Error(`forest "${rootId}" batch repeats or reorders position ${forestSeq}`);
        lastForestSeq = forestSeq;
        const chunk = chunks.get(sessionId);
        if (chunk === undefined) {
          chunks.set(sessionId, { firstSeq: seq, lastSeq: seq, parts: [`[${forestSeq},${body}]`] });
        } else {
          if (seq !== chunk.lastSeq + 1) throw new Error(`session "${sessionId}" batch has a gap at seq ${seq}`);
          chunk.lastSeq = seq;
          chunk.parts.push(`[${forestSeq},${body}]`);
        }
        if (messageId !== null) encoded.messageValues.push(messageId, sessionId, seq);
        if (MARKED_TYPES.has(type)) encoded.marks.push([sessionId, seq, type, turnId, body]);
      }
      const keys: [string, number][] = [];
      for (const [sessionId, c] of chunks) {
        encoded.chunks.push([sessionId, c.firstSeq, c.lastSeq, rootId, `[${c.parts.join(',')}]`]);
        keys.push([sessionId, c.firstSeq]);
      }
      encoded.pages.push([rootId, page[0]![7], lastForestSeq, JSON.stringify(keys)]);
    }
  }
  return encoded;
}

/** A forest's last stored position, from its newest page: the writer's check and the store's reads. */
export const LAST_FOREST_SEQ = 'SELECT last_forest_seq AS last FROM forest_pages WHERE root_id = ? ORDER BY first_forest_seq DESC LIMIT 1';

/**
 * Inserts encoded entry rows on a connection, inside the caller's transaction: the writer's
 * batches and migration 4's move of older entries. A forest page may not reach back into the
 * positions its forest already stored (the unique forest position the old layout indexed).
 */
export function entryInserter(db: Database.Database): (rows: EntryRows) => void {
  const insertChunk = db.prepare<ChunkRow>(
    'INSERT INTO session_chunks (session_id, first_seq, last_seq, root_id, entries) VALUES (?, ?, ?, ?, ?)',
  );
  const lastPage = db.prepare<[string], { last: number }>(LAST_FOREST_SEQ);
  const insertPage = db.prepare<PageRow>('INSERT INTO forest_pages (root_id, first_forest_seq, last_forest_seq, chunks) VALUES (?, ?, ?, ?)');
  const insertMessages = messageInserter(db);
  const insertMark = db.prepare<MarkRow>('INSERT INTO entry_marks (session_id, seq, type, turn_id, body) VALUES (?, ?, ?, ?, ?)');
  return (rows) => {
    for (const row of rows.chunks) insertChunk.run(...row);
    for (const row of rows.pages) {
      const last = lastPage.get(row[0])?.last ?? 0;
      if (row[1] <= last) throw new Error(`forest "${row[0]}" is already at position ${last}; refusing position ${row[1]} again`);
      insertPage.run(...row);
    }
    insertMessages(rows.messageValues);
    for (const row of rows.marks) insertMark.run(...row);
  };
}

/**
 * Message-id rows go in with one INSERT of up to this many rows, not one statement call per
 * row: a report writes three, and the calls cost more than the B-tree inserts they made. Per
 * report call on the step service (durable SQLite, 50 calls in flight, instructions of the
 * whole process under valgrind): 163,600 with a call per row, 138,700 with these statements,
 * 125,300 writing no message rows at all.
 */
const MESSAGE_ROWS_PER_INSERT = 64;

/** Inserts flat message-id rows (see EncodedBatch) a statement of up to MESSAGE_ROWS_PER_INSERT rows at a time. */
function messageInserter(db: Database.Database): (values: readonly (string | number)[]) => void {
  const bySize = new Map<number, Database.Statement<(string | number)[]>>();
  const statement = (rows: number): Database.Statement<(string | number)[]> => {
    let prepared = bySize.get(rows);
    if (prepared === undefined) {
      const tuples = Array.from({ length: rows }, () => '(?, ?, ?)').join(', ');
      prepared = db.prepare<(string | number)[]>(`INSERT INTO entry_messages (message_id, session_id, seq) VALUES ${tuples}`);
      bySize.set(rows, prepared);
    }
    return prepared;
  };
  const step = 3 * MESSAGE_ROWS_PER_INSERT;
  return (values) => {
    for (let at = 0; at < values.length; at += step) {
      const part = values.length <= step ? values : values.slice(at, at + step);
      statement(part.length / 3).run(...part);
    }
  };
}

/** The prepared write statements of one connection. */
export class SqliteWrites {
  private readonly apply: (batch: EncodedBatch) => void;
  private readonly expireStatement: Database.Statement<[number]>;

  constructor(private readonly db: Database.Database) {
    const insertSession = db.prepare<SessionRow>(
      'INSERT INTO sessions (id, kind, parent_session, created_at, header, last_seq) VALUES (?, ?, ?, ?, ?, 0)',
    );
    const advanceSeq = db.prepare<[number, string, number]>('UPDATE sessions SET last_seq = ? WHERE id = ? AND last_seq = ?');
    const insertEntries = entryInserter(db);
    const deletePending = db.prepare<[string, string]>('DELETE FROM pending WHERE session_id = ? AND message_id = ?');
    const putPending = db.prepare(
      'INSERT OR REPLACE INTO pending (session_id, message_id, position, kind, item_id, message, accepted_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    );
    const putIdempotency = db.prepare<IdempotencyRow>(
      `INSERT INTO idempotency (sender, key, fingerprint, status, response, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (sender, key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status,
         response = excluded.response, created_at = excluded.created_at, expires_at = excluded.expires_at`,
    );
    this.expireStatement = db.prepare('DELETE FROM idempotency WHERE expires_at <= ?');
    const writeWebhooks = webhookWriter(db);
    const writeSettings = settingWriter(db);
    const writeTenantUsage = tenantUsageWriter(db);
    const writeProviderLimits = providerLimitWriter(db);
    const writeApprovals = approvalWriter(db);
    // Any throw inside rolls the whole batch back.
    this.apply = db.transaction((batch: EncodedBatch) => {
      for (const row of batch.sessions) insertSession.run(...row);
      const advance = seqAdvances(batch.chunks);
      insertEntries(batch);
      for (const [sessionId, { from, to }] of advance) {
        if (advanceSeq.run(to, sessionId, from).changes !== 1) {
          throw new Error(`session "${sessionId}" is not at seq ${from}; refusing a gap or duplicate`);
        }
      }
      // The approvals index, from the entries just written (sqlite-approvals.ts).
      if (batch.approvals.length > 0) writeApprovals(batch.approvals);
      for (const row of batch.pending) {
        if (row.length === 2) deletePending.run(...row);
        else putPending.run(...row);
      }
      for (const row of batch.idempotency) putIdempotency.run(...row);
      if (batch.outbox.length > 0 || batch.webhooks.length > 0) writeWebhooks(batch.outbox, batch.webhooks);
      if (batch.settings.length > 0) writeSettings(batch.settings);
      if (batch.tenantUsage.length > 0) writeTenantUsage(batch.tenantUsage);
      if (batch.providerLimits.length > 0) writeProviderLimits(batch.providerLimits);
    });
  }

  /**
   * Applies one batch in one transaction. When it fails (a full disk, an I/O error), the WAL is
   * checkpointed and truncated before the error goes back: its space returns to the volume, so
   * the retry of the kept batch (session-log.ts) has room as soon as any space is freed.
   */
  write(batch: EncodedBatch): void {
    try {
      this.apply(batch);
    } catch (error) {
      this.truncateWal();
      throw error;
    }
  }

  private truncateWal(): void {
    try {
      this.db.pragma('wal_checkpoint(TRUNCATE)');
    } catch {
      // A checkpoint that cannot run now (the disk is gone, a reader holds it) changes nothing.
    }
  }

  expireIdempotency(now: number): number {
    return this.expireStatement.run(now).changes;
  }

  /** The settings this connection writes with, for diagnostics and tests. */
  settings(): WriterSettings {
    return {
      journalMode: String(this.db.pragma('journal_mode', { simple: true })),
      synchronous: Number(this.db.pragma('synchronous', { simple: true })),
      autocheckpointPages: Number(this.db.pragma('wal_autocheckpoint', { simple: true })),
      walSizeLimitBytes: Number(this.db.pragma('journal_size_limit', { simple: true })),
    };
  }
}
