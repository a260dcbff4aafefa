/**
 * The session log: the single writer in front of a SessionStore. It assigns each entry its
 * per-session `seq` synchronously (so the agent runtime can append inside the same synchronous
 * span as the state change it records) and commits everything appended in one event-loop turn
 * as one store batch (group commit). `durable()` resolves once everything appended before the
 * call is committed; routes await it before they acknowledge, so an acknowledged write is on
 * disk. Only sessions of live agents keep a seq counter in memory.
 *
 * A failed batch is kept and retried ahead of later writes, so the on-disk order never differs
 * from the assigned order; callers waiting on it get the error.
 */
import type { Logger } from 'pino';
import type { EntryBody, SessionEntry, SessionHeader } from '../domain/session.js';
import { batchIsEmpty, type IdempotencyRecord, type PendingOp, type SessionStore, type WriteBatch } from './session-store.js';

interface PendingBatch extends WriteBatch {
  done: Promise<void>;
  settle: (error?: unknown) => void;
}

export class SessionLog {
  private readonly lastSeq = new Map<string, number>();
  private pending: PendingBatch = emptyBatch();
  private inflight: PendingBatch | null = null;
  private scheduled = false;
  private failedBatch: WriteBatch | null = null;

  constructor(
    readonly store: SessionStore,
    private readonly logger?: Logger,
  ) {}

  /** Queue a new session's header; its entries start at seq 1. */
  create(header: SessionHeader): void {
    if (this.lastSeq.has(header.id)) throw new Error(`session "${header.id}" is already open`);
    this.lastSeq.set(header.id, 0);
    this.pending.headers.push(header);
    this.schedule();
  }

  /** Open an existing session for appending at `lastSeq + 1`. */
  open(id: string, lastSeq: number): void {
    this.lastSeq.set(id, lastSeq);
  }

  /** Stop tracking a session whose agent left the live registry. Pending writes still commit. */
  release(id: string): void {
    this.lastSeq.delete(id);
  }

  isOpen(id: string): boolean {
    return this.lastSeq.has(id);
  }

  append(id: string, body: EntryBody): SessionEntry {
    const last = this.lastSeq.get(id);
    if (last === undefined) throw new Error(`session "${id}" is not open for appending`);
    const entry = { seq: last + 1, ...body } as SessionEntry;
    this.lastSeq.set(id, entry.seq);
    this.pending.entries.push({ sessionId: id, entry });
    this.schedule();
    return entry;
  }

  /**
   * Change a session's pending rows (its queued and steering inbox items and staged context)
   * in the same batch as the entries appended so far, so the log and the pending set always
   * commit together.
   */
  changePending(ops: readonly PendingOp[]): void {
    if (ops.length === 0) return;
    (this.pending.pending ??= []).push(...ops);
    this.schedule();
  }

  /** Record an idempotent result in the same batch as the writes it describes. */
  putIdempotency(record: IdempotencyRecord): void {
    (this.pending.idempotency ??= []).push(record);
    this.schedule();
  }

  /** Resolves when every write queued before this call is committed. */
  durable(): Promise<void> {
    if (!batchIsEmpty(this.pending)) return this.pending.done;
    // A failed batch is not durable: retry it now rather than report success.
    if (this.inflight === null && this.failedBatch !== null) this.commitNow();
    return this.inflight?.done ?? Promise.resolve();
  }

  /** Entries after `after` (committed first, so reads see every acknowledged write). */
  async read(id: string, after: number, limit?: number): Promise<SessionEntry[]> {
    await this.durable();
    return this.store.read(id, after, limit);
  }

  /** Commit everything pending now and wait for it. */
  async flush(): Promise<void> {
    const done = this.durable();
    this.commitNow();
    await done;
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.commitNow();
    });
  }

  private commitNow(): void {
    if (this.inflight !== null) return; // the in-flight commit picks up the rest when it ends
    const batch = this.pending;
    if (batchIsEmpty(batch) && this.failedBatch === null) return;
    this.pending = emptyBatch();
    const toWrite: WriteBatch = this.failedBatch === null ? batch : mergeBatches(this.failedBatch, batch);
    this.inflight = batch;
    this.store.write(toWrite).then(
      () => {
        this.failedBatch = null;
        batch.settle();
      },
      (error: unknown) => {
        this.failedBatch = toWrite;
        this.logger?.error({ err: error, entries: toWrite.entries.length }, 'session batch commit failed; will retry');
        batch.settle(error);
      },
    ).finally(() => {
      this.inflight = null;
      if (!batchIsEmpty(this.pending)) this.commitNow();
    });
  }
}

/** A failed batch followed by a newer one, in order. */
function mergeBatches(first: WriteBatch, second: WriteBatch): WriteBatch {
  return {
    headers: [...first.headers, ...second.headers],
    entries: [...first.entries, ...second.entries],
    pending: [...(first.pending ?? []), ...(second.pending ?? [])],
    idempotency: [...(first.idempotency ?? []), ...(second.idempotency ?? [])],
  };
}

function emptyBatch(): PendingBatch {
  let settle!: (error?: unknown) => void;
  const done = new Promise<void>((resolve, reject) => {
    settle = (error) => (error === undefined ? resolve() : reject(error));
  });
  // A batch nobody waits for must not become an unhandled rejection; waiters still see it.
  done.catch(() => undefined);
  return { headers: [], entries: [], done, settle };
}
