/**
 * A batch of the session log, being filled or committed, and how its commit ends for those who
 * wait on it. A commit ends one of two ways:
 * - `failed`: the store failed; nothing of the batch landed, the log retries it whole, and every
 *   waiter is told STORE_UNAVAILABLE;
 * - `committed`: it landed, possibly without the rows of forests the store refused (another
 *   instance took them over; see batch-forests.ts). Only the waiters of a refused forest are
 *   told MISDIRECTED: nothing of theirs landed here, so they send the request again to the
 *   forest's new owner. Everyone else's writes committed and they are answered normally.
 */
import { MESSAGES, ServiceError } from '../domain/errors.js';
import type { WriteBatch } from './session-store.js';

export type CommitResult = { kind: 'committed'; refused: ReadonlySet<string> } | { kind: 'failed'; error: unknown };

export interface PendingBatch extends WriteBatch {
  /** How the batch's commit ended; never rejects. */
  readonly result: Promise<CommitResult>;
  settle(result: CommitResult): void;
}

/** The result of a commit that refused nothing, for waiters with nothing left to wait for. */
export const COMMITTED: CommitResult = { kind: 'committed', refused: new Set() };

/** What the waiters of a failed commit are told: their write is kept and lands once the store is back. */
export function storeUnavailable(cause: unknown): ServiceError {
  return new ServiceError('STORE_UNAVAILABLE', MESSAGES.storeUnavailable, { cause });
}

/** Why the writes of these forests were left out: this instance no longer holds their lease. */
export function fencedWrite(roots: readonly string[]): ServiceError {
  return new ServiceError(
    'FOREST_FENCED',
    `this instance no longer owns forest(s) ${roots.join(', ')} (its lease was lost or taken over); their writes were refused`,
    { roots },
  );
}

/**
 * What the waiter of a refused write is told. With its forest named: that forest's writes
 * were refused and nothing of them landed. Without (a waiter for every forest): some forest
 * written in the commit was refused, so its own writes may have been among them.
 */
export function refusedWaiter(refused: readonly string[], root?: string): ServiceError {
  const message = root === undefined
    ? 'the writes of this request to one of its forests were refused: another instance took the forest over (or, for a report, this instance had not yet applied a package change that revoked report); send the request again'
    : `the writes of this request to forest "${root}" were refused and did not land: another instance took the forest over (or, for a report, this instance had not yet applied a package change that revoked report); send the request again`;
  return new ServiceError('MISDIRECTED', message, { cause: fencedWrite(root === undefined ? refused : [root]) });
}

export function emptyBatch(): PendingBatch {
  let settle!: (result: CommitResult) => void;
  const result = new Promise<CommitResult>((resolve) => {
    settle = resolve;
  });
  return { headers: [], entries: [], result, settle };
}

/** A failed batch followed by a newer one, in order. */
export function mergeBatches(first: WriteBatch, second: WriteBatch): WriteBatch {
  return {
    headers: [...first.headers, ...second.headers],
    entries: [...first.entries, ...second.entries],
    pending: [...(first.pending ?? []), ...(second.pending ?? [])],
    idempotency: [...(first.idempotency ?? []), ...(second.idempotency ?? [])],
    outbox: [...(first.outbox ?? []), ...(second.outbox ?? [])],
    webhooks: [...(first.webhooks ?? []), ...(second.webhooks ?? [])],
    settings: [...(first.settings ?? []), ...(second.settings ?? [])],
    tenantUsage: [...(first.tenantUsage ?? []), ...(second.tenantUsage ?? [])],
    providerLimits: [...(first.providerLimits ?? []), ...(second.providerLimits ?? [])],
  };
}
