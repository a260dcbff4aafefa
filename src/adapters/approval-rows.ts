/**
 * The approvals index as rows, shared by the three stores (src/sessions/approvals.ts). A row is
 * derived from each `approval` entry a batch writes, so it commits, and is fenced and left out,
 * with that entry; the body is the approval as the entry has it, as JSON text, parsed afresh on
 * every read so a caller never holds what was stored. What a query matches is decided here once:
 * the SQL stores build their WHERE from `approvalConditions`, the memory store filters with
 * `approvalMatches`, and both agree on the state of an approval at the time asked.
 */
import type { Approval } from '../domain/approvals.js';
import type { ApprovalQuery } from '../sessions/approvals.js';
import type { BatchEntry } from '../sessions/session-store.js';

/** One approval as the index keeps it; `body` is the whole approval as JSON text. */
export type ApprovalRow = [id: string, rootId: string, agentId: string, state: string, requestedAt: string, expiresAt: string, body: string];

/** What the stores read back: the body alone holds the approval. */
export interface ApprovalDbRow {
  body: string;
}

/**
 * The index rows a batch's entries put: one per approval id, the one of its last entry in batch
 * order (a statement that upserts many rows at once may not touch one row twice). Empty, and
 * cheap, for a batch without approval entries.
 */
export function approvalRows(entries: readonly BatchEntry[]): ApprovalRow[] {
  let byId: Map<string, ApprovalRow> | undefined;
  for (const { entry } of entries) {
    if (entry.type !== 'approval') continue;
    const a = entry.approval;
    byId ??= new Map();
    // Deleted first, so the map's order is the order of each id's last entry.
    byId.delete(a.id);
    byId.set(a.id, [a.id, a.rootId, a.agentId, a.state, a.requestedAt, a.expiresAt, JSON.stringify(a)]);
  }
  return byId === undefined ? [] : [...byId.values()];
}

export function approvalOf(row: ApprovalDbRow): Approval {
  return JSON.parse(row.body) as Approval;
}

/**
 * A list query's conditions on the columns `root_id`, `state`, `requested_at`, `expires_at` and
 * `id`, ANDed; `param` binds a value and returns its placeholder (`?` for SQLite, `$n` for
 * PostgreSQL). The state is the state at `now`: a pending approval past its `expiresAt` is
 * expired. The page starts strictly after `after` in (requested_at, id) order.
 */
export function approvalConditions(query: ApprovalQuery, param: (value: string) => string): string[] {
  const conditions: string[] = [];
  if (query.rootId !== undefined) conditions.push(`root_id = ${param(query.rootId)}`);
  if (query.state === 'pending') conditions.push(`state = 'pending' AND expires_at > ${param(query.now)}`);
  else if (query.state === 'expired') conditions.push(`(state = 'expired' OR (state = 'pending' AND expires_at <= ${param(query.now)}))`);
  else if (query.state !== undefined) conditions.push(`state = ${param(query.state)}`);
  if (query.after !== undefined) conditions.push(`(requested_at, id) > (${param(query.after.requestedAt)}, ${param(query.after.id)})`);
  return conditions;
}

/** Whether a stored approval is in a list query's page range and filters (the memory store's WHERE). */
export function approvalMatches(row: ApprovalRow, query: ApprovalQuery): boolean {
  const [, rootId, , state, , expiresAt] = row;
  if (query.rootId !== undefined && rootId !== query.rootId) return false;
  if (query.state === 'pending') {
    if (state !== 'pending' || expiresAt <= query.now) return false;
  } else if (query.state === 'expired') {
    if (state !== 'expired' && !(state === 'pending' && expiresAt <= query.now)) return false;
  } else if (query.state !== undefined && state !== query.state) {
    return false;
  }
  if (query.after !== undefined && compareApprovals(row, query.after) <= 0) return false;
  return true;
}

/** The list order, by (requestedAt, id), in code-unit order as the SQL stores compare bytes (ids and times are ASCII). */
export function compareApprovals(row: ApprovalRow, position: { requestedAt: string; id: string }): number {
  const [id, , , , requestedAt] = row;
  if (requestedAt !== position.requestedAt) return requestedAt < position.requestedAt ? -1 : 1;
  return id === position.id ? 0 : id < position.id ? -1 : 1;
}

/** Whether a stored approval is pending at `now`: stored pending and not yet past its `expiresAt`. */
export function pendingAt(row: ApprovalRow, now: string): boolean {
  return row[3] === 'pending' && row[5] > now;
}
