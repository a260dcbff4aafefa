/**
 * The approvals index in PostgreSQL: the table (migration 8), the writes a batch applies inside
 * its transaction after its entries, and the reads. A row is put for each `approval` entry the
 * batch writes, from the rows the fence admitted (postgres-store.ts encodes the batch again
 * without a refused forest's rows), so a forest left out leaves its approvals out too; the last
 * entry of an approval written is what the index holds (approval-rows.ts).
 *
 * The body is JSON text, as entries are kept, not JSONB as settings are: an approval holds the
 * tool call's input, and JSONB refuses what JSON text allows and the entry beside it kept (a
 * `\u0000` in a string), which would fail the whole batch. Times and ids compare in byte order
 * (COLLATE "C"), as the other stores compare them, whatever the database's collation, and the
 * indexes serve the list in that order.
 */
import type pg from 'pg';
import type { Approval } from '../../domain/approvals.js';
import type { ApprovalQuery, ApprovalReads } from '../../sessions/approvals.js';
import { approvalConditions, approvalOf, type ApprovalDbRow, type ApprovalRow } from '../approval-rows.js';

export const POSTGRES_APPROVAL_TABLES = `
  CREATE TABLE approvals (
    id           TEXT COLLATE "C" PRIMARY KEY,
    root_id      TEXT COLLATE "C" NOT NULL,
    agent_id     TEXT NOT NULL,
    state        TEXT NOT NULL,
    requested_at TEXT COLLATE "C" NOT NULL,
    expires_at   TEXT COLLATE "C" NOT NULL,
    body         TEXT NOT NULL
  );
  CREATE INDEX approvals_order ON approvals (requested_at, id);
  CREATE INDEX approvals_root ON approvals (root_id, requested_at, id);
  CREATE INDEX approvals_state ON approvals (state, requested_at, id);
  CREATE INDEX approvals_pending_expiry ON approvals (expires_at) WHERE state = 'pending';
`;

/**
 * Puts a batch's approval rows on the client of its transaction, in one statement: the rows are
 * one per id already (a statement may not upsert one row twice).
 */
export async function writeApprovalRows(client: pg.PoolClient, rows: readonly ApprovalRow[]): Promise<void> {
  const columns: string[][] = [[], [], [], [], [], [], []];
  for (const row of rows) for (let i = 0; i < columns.length; i++) columns[i]!.push(row[i]!);
  await client.query(
    `INSERT INTO approvals (id, root_id, agent_id, state, requested_at, expires_at, body)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
     ON CONFLICT (id) DO UPDATE SET root_id = excluded.root_id, agent_id = excluded.agent_id, state = excluded.state,
       requested_at = excluded.requested_at, expires_at = excluded.expires_at, body = excluded.body`,
    columns,
  );
}

export class PostgresApprovals implements ApprovalReads {
  constructor(private readonly pool: pg.Pool) {}

  async list(query: ApprovalQuery): Promise<Approval[]> {
    const values: (string | number)[] = [];
    const conditions = approvalConditions(query, (value) => `$${values.push(value)}`);
    const where = conditions.length === 0 ? '' : ` WHERE ${conditions.join(' AND ')}`;
    values.push(query.limit);
    const { rows } = await this.pool.query<ApprovalDbRow>(`SELECT body FROM approvals${where} ORDER BY requested_at, id LIMIT $${values.length}`, values);
    return rows.map(approvalOf);
  }

  async get(id: string): Promise<Approval | undefined> {
    const { rows } = await this.pool.query<ApprovalDbRow>('SELECT body FROM approvals WHERE id = $1', [id]);
    return rows[0] === undefined ? undefined : approvalOf(rows[0]);
  }

  async countPending(now: string): Promise<number> {
    const { rows } = await this.pool.query<{ n: string }>(`SELECT count(*) AS n FROM approvals WHERE state = 'pending' AND expires_at > $1`, [now]);
    return Number(rows[0]?.n ?? 0);
  }
}
