/**
 * The rows of one batch into PostgreSQL, on the client of the transaction that holds them:
 * sessions, entries (advancing each session's `last_seq` by compare-and-set, so a gap or a
 * duplicate seq aborts the transaction), pending changes in order, idempotency records, the
 * webhook outbox and changes (postgres-webhooks.ts), operator settings (postgres-settings.ts),
 * the approvals index rows the entries put (postgres-approvals.ts), and what the instances
 * publish for each other's limits (postgres-usage.ts).
 */
import type pg from 'pg';
import { seqAdvances, type BatchRows } from '../batch-rows.js';
import { writeApprovalRows } from './postgres-approvals.js';
import { writeSettingRows } from './postgres-settings.js';
import { writeProviderLimitRows, writeTenantUsageRows } from './postgres-usage.js';
import { writeWebhookRows } from './postgres-webhooks.js';

export async function writeRows(client: pg.PoolClient, rows: BatchRows): Promise<void> {
  if (rows.sessions.length > 0) {
    await client.query(
      `INSERT INTO sessions (id, kind, parent_session, created_at, header, last_seq)
       SELECT * , 0 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])`,
      columns(rows.sessions, 5),
    );
  }
  if (rows.entries.length > 0) {
    await client.query(
      `INSERT INTO entries (session_id, seq, type, body, message_id, turn_id, root_id, forest_seq)
       SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[])`,
      columns(rows.entries, 8),
    );
    const advance = seqAdvances(rows.entries.map(([sessionId, seq]) => [sessionId, seq, seq] as const));
    const ids = [...advance.keys()];
    const moved = await client.query(
      `UPDATE sessions s SET last_seq = a.to_seq
       FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS a(id, from_seq, to_seq)
       WHERE s.id = a.id AND s.last_seq = a.from_seq`,
      [ids, ids.map((id) => advance.get(id)!.from), ids.map((id) => advance.get(id)!.to)],
    );
    if (moved.rowCount !== ids.length) {
      throw new Error(`a session of this batch is not at the seq it continues from; refusing a gap or duplicate (${ids.join(', ')})`);
    }
  }
  if (rows.approvals.length > 0) await writeApprovalRows(client, rows.approvals);
  for (const row of rows.pending) {
    if (row.length === 2) {
      await client.query('DELETE FROM pending WHERE session_id = $1 AND message_id = $2', row);
    } else {
      await client.query(
        `INSERT INTO pending (session_id, message_id, position, kind, item_id, message, accepted_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (session_id, message_id) DO UPDATE SET position = excluded.position, kind = excluded.kind,
           item_id = excluded.item_id, message = excluded.message, accepted_at = excluded.accepted_at`,
        row,
      );
    }
  }
  for (const row of rows.idempotency) {
    await client.query(
      `INSERT INTO idempotency (sender, key, fingerprint, status, response, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (sender, key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status,
         response = excluded.response, created_at = excluded.created_at, expires_at = excluded.expires_at`,
      row,
    );
  }
  if (rows.outbox.length > 0 || rows.webhooks.length > 0) await writeWebhookRows(client, rows.outbox, rows.webhooks);
  if (rows.settings.length > 0) await writeSettingRows(client, rows.settings);
  if (rows.tenantUsage.length > 0) await writeTenantUsageRows(client, rows.tenantUsage);
  if (rows.providerLimits.length > 0) await writeProviderLimitRows(client, rows.providerLimits);
}

/** Rows of tuples as one array per column, for `unnest`. */
function columns(rows: readonly (readonly unknown[])[], width: number): unknown[][] {
  const out: unknown[][] = Array.from({ length: width }, () => []);
  for (const row of rows) for (let i = 0; i < width; i++) out[i]!.push(row[i]);
  return out;
}
