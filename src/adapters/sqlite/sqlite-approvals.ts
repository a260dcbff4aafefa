/**
 * The approvals index in SQLite: the table (schema version 8), the writes a batch applies inside
 * its transaction after its entries (on the writer's connection) and the reads (on the store's).
 * A row is put for each `approval` entry a batch writes, as the entry has the approval: the
 * last one written is what the index holds (approval-rows.ts).
 *
 * The list is in (requested_at, id) order, byte order as SQLite compares text (ISO-8601 UTC
 * times sort as they compare): one index serves it whole, one each a forest's and a state's
 * part of it; pending rows by expiry serve the count of what is pending now.
 */
import type Database from 'better-sqlite3';
import type { Approval } from '../../domain/approvals.js';
import type { ApprovalQuery, ApprovalReads } from '../../sessions/approvals.js';
import { approvalConditions, approvalOf, type ApprovalDbRow, type ApprovalRow } from '../approval-rows.js';

export const APPROVAL_TABLES = `
  CREATE TABLE approvals (
    id           TEXT PRIMARY KEY,
    root_id      TEXT NOT NULL,
    agent_id     TEXT NOT NULL,
    state        TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    expires_at   TEXT NOT NULL,
    body         TEXT NOT NULL -- JSON: the approval as its last entry has it
  );
  CREATE INDEX approvals_order ON approvals (requested_at, id);
  CREATE INDEX approvals_root ON approvals (root_id, requested_at, id);
  CREATE INDEX approvals_state ON approvals (state, requested_at, id);
  CREATE INDEX approvals_pending_expiry ON approvals (expires_at) WHERE state = 'pending';
`;

/** Puts approval rows, in order (the last of an id wins), inside the caller's transaction. */
export function approvalWriter(db: Database.Database): (rows: readonly ApprovalRow[]) => void {
  const put = db.prepare<ApprovalRow>(
    `INSERT INTO approvals (id, root_id, agent_id, state, requested_at, expires_at, body) VALUES (?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (id) DO UPDATE SET root_id = excluded.root_id, agent_id = excluded.agent_id, state = excluded.state,
       requested_at = excluded.requested_at, expires_at = excluded.expires_at, body = excluded.body`,
  );
  return (rows) => {
    for (const row of rows) put.run(...row);
  };
}

/** The approval reads, on the store's reading connection. */
export class SqliteApprovals implements ApprovalReads {
  private readonly statements;
  /** The list's statements by their SQL: one per combination of filters a query uses (at most 16). */
  private readonly lists = new Map<string, Database.Statement<(string | number)[], ApprovalDbRow>>();

  constructor(private readonly db: Database.Database) {
    this.statements = {
      get: db.prepare<[string], ApprovalDbRow>('SELECT body FROM approvals WHERE id = ?'),
      // The partial index counts only what is pending now; without INDEXED BY the planner may walk every pending row.
      countPending: db.prepare<[string], { n: number }>(
        `SELECT count(*) AS n FROM approvals INDEXED BY approvals_pending_expiry WHERE state = 'pending' AND expires_at > ?`,
      ),
    };
  }

  async list(query: ApprovalQuery): Promise<Approval[]> {
    const values: (string | number)[] = [];
    const conditions = approvalConditions(query, (value) => {
      values.push(value);
      return '?';
    });
    const where = conditions.length === 0 ? '' : ` WHERE ${conditions.join(' AND ')}`;
    const sql = `SELECT body FROM approvals${where} ORDER BY requested_at, id LIMIT ?`;
    let statement = this.lists.get(sql);
    if (statement === undefined) this.lists.set(sql, (statement = this.db.prepare<(string | number)[], ApprovalDbRow>(sql)));
    return statement.all(...values, query.limit).map(approvalOf);
  }

  async get(id: string): Promise<Approval | undefined> {
    const row = this.statements.get.get(id);
    return row === undefined ? undefined : approvalOf(row);
  }

  async countPending(now: string): Promise<number> {
    return this.statements.countPending.get(now)?.n ?? 0;
  }
}
