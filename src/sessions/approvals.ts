/**
 * Approvals as the store indexes them, for the inbox across every forest. An approval's truth
 * is its `approval` entries in the session of the agent that asked (src/domain/approvals.ts):
 * each such entry a batch writes also puts the approval, as the entry has it, into the index,
 * in the same transaction (so the index is fenced, and left out, with its forest's entries).
 * The last entry of an approval written is what the index holds.
 */
import type { Approval, ApprovalState } from '../domain/approvals.js';

/** Where a page of the inbox starts: after this (requestedAt, id). */
export interface ApprovalPosition {
  requestedAt: string;
  id: string;
}

export interface ApprovalQuery {
  /**
   * Only approvals in this state, as it is at `now`: a pending approval whose `expiresAt` is at
   * or before `now` counts as `expired` (its agent writes that when it is next live).
   */
  state?: ApprovalState;
  rootId?: string;
  after?: ApprovalPosition;
  limit: number;
  /** ISO time the query is asked at. */
  now: string;
}

/** The store's approval reads (writes are the `approval` entries of batches). */
export interface ApprovalReads {
  /** Approvals oldest first (requestedAt, then id), as last written. */
  list(query: ApprovalQuery): Promise<Approval[]>;
  /** One approval as last written, or undefined. */
  get(id: string): Promise<Approval | undefined>;
  /** How many approvals are pending at `now` (not yet past their `expiresAt`). */
  countPending(now: string): Promise<number>;
}
