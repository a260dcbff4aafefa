/**
 * The approvals index in memory: one row per approval id, its approval kept as JSON text as the
 * SQL stores keep it, so a caller never holds what was stored. The store applies the rows of
 * the entries it commits, in batch order (approval-rows.ts); a list filters and orders as the
 * SQL stores' queries do.
 */
import type { Approval } from '../../domain/approvals.js';
import type { ApprovalQuery, ApprovalReads } from '../../sessions/approvals.js';
import { approvalMatches, approvalOf, compareApprovals, pendingAt, type ApprovalRow } from '../approval-rows.js';

const bodyOf = (row: ApprovalRow): Approval => approvalOf({ body: row[6] });

export class MemoryApprovals implements ApprovalReads {
  private readonly rows = new Map<string, ApprovalRow>();

  /** Puts a committed batch's approval rows, in order: the last of an id wins. */
  apply(rows: readonly ApprovalRow[]): void {
    for (const row of rows) this.rows.set(row[0], row);
  }

  async list(query: ApprovalQuery): Promise<Approval[]> {
    const matching = [...this.rows.values()].filter((row) => approvalMatches(row, query));
    matching.sort((a, b) => compareApprovals(a, { requestedAt: b[4], id: b[0] }));
    return matching.slice(0, Math.max(0, query.limit)).map(bodyOf);
  }

  async get(id: string): Promise<Approval | undefined> {
    const row = this.rows.get(id);
    return row === undefined ? undefined : bodyOf(row);
  }

  async countPending(now: string): Promise<number> {
    let n = 0;
    for (const row of this.rows.values()) if (pendingAt(row, now)) n++;
    return n;
  }
}
