/**
 * The session log: the single writer in front of a SessionStore. It assigns each entry its
 * per-session `seq` synchronously (so the agent runtime can append inside the same synchronous
 * span as the state change it records) and commits everything appended in one event-loop turn
 * as one store batch (group commit). `durable()` resolves once everything appended before the
 * call is committed; routes await it before they acknowledge, so an acknowledged write is on
 * disk. Only sessions of live agents keep a seq counter in memory.
 *
 * Each entry also gets a forest-wide `forestSeq` (gap-free per root), the id of forest event
 * streams. Committed batches are announced to subscribers (event streams, metrics).
 *
 * A failed batch is kept and retried ahead of later writes, so the on-disk order never differs
 * from the assigned order; callers waiting on it get the error.
 */
import type { Logger } from 'pino';
import { isServiceError, ServiceError } from '../domain/errors.js';
import type { EntryBody, SessionEntry, SessionHeader } from '../domain/session.js';
import { batchIsEmpty, type BatchEntry, type CompactionEntry, type IdempotencyRecord, type PendingOp, type SessionStore, type SessionSummary, type WriteBatch } from './session-store.js';

/**
 * What the waiters of a fenced commit are told. Another instance took over a forest written in
 * it, or a report in it came from an instance behind the revocation of `report`
 * (stores/postgres-packages.ts); writes for other forests that shared the commit are retried
 * and may still land.
 */
const FENCED_MESSAGE =
  'a commit was refused because another instance took over a forest written in it (or, for a report, because this instance had not yet ' +
  'applied a package change that revoked report): a request for that forest should be sent again ' +
  '(it will be redirected); a request for another forest may still have been written, so repeat it only with the same Idempotency-Key';

interface PendingBatch extends WriteBatch {
  done: Promise<void>;
  settle: (error?: unknown) => void;
}

export type CommitListener = (batch: WriteBatch, elapsedMs: number) => void;

/**
 * Told of every header and entry as it is queued, in the synchronous span that queues it
 * (before it commits): what follows from an entry can then be in force at once, as a step's
 * charge to its budget is.
 */
export interface WriteObserver {
  created(header: SessionHeader): void;
  appended(item: BatchEntry): void;
}

export class SessionLog {
  /** Open sessions: their last seq and their forest's root. */
  private readonly sessions = new Map<string, { seq: number; root: string }>();
  /**
   * Forests this process has written to: the last forestSeq assigned and how many sessions are
   * open. Kept after the last session closes, so a reload can never hand out a position twice.
   */
  private readonly forests = new Map<string, { seq: number; open: number }>();
  private readonly listeners = new Set<CommitListener>();
  private readonly observers: WriteObserver[] = [];
  /** Forest loads in flight, shared by concurrent callers. */
  private readonly loadingForests = new Map<string, Promise<void>>();
  private pending: PendingBatch = emptyBatch();
  private inflight: PendingBatch | null = null;
  private scheduled = false;
  private failedBatch: WriteBatch | null = null;

  constructor(
    readonly store: SessionStore,
    private readonly logger?: Logger,
    /** Called with the roots of a write the database refused because their lease was lost. */
    private readonly onFenced: (roots: readonly string[]) => void = () => undefined,
  ) {}

  /** Queue a new session's header; its entries start at seq 1. A child's forest must be open. */
  create(header: SessionHeader): void {
    if (this.sessions.has(header.id)) throw new Error(`session "${header.id}" is already open`);
    const root = header.rootSession ?? header.id;
    if (root === header.id && !this.forests.has(root)) this.forests.set(root, { seq: 0, open: 0 });
    this.track(header.id, 0, root);
    this.pending.headers.push(header);
    this.schedule();
    for (const observer of this.observers) observer.created(header);
  }

  /**
   * Load a forest's last forestSeq from the store (after pending writes commit), so its
   * sessions can be opened. A no-op while the forest is open.
   */
  async loadForest(root: string): Promise<void> {
    if (this.forests.has(root)) return;
    let loading = this.loadingForests.get(root);
    if (loading === undefined) {
      loading = (async () => {
        await this.durable();
        const last = await this.store.lastForestSeq(root);
        const known = this.forests.get(root);
        if (known === undefined) this.forests.set(root, { seq: last, open: 0 });
        else known.seq = Math.max(known.seq, last);
      })().finally(() => this.loadingForests.delete(root));
      this.loadingForests.set(root, loading);
    }
    await loading;
  }

  /** Whether a forest's last forestSeq is loaded, so its sessions can be opened. */
  forestLoaded(root: string): boolean {
    return this.forests.has(root);
  }

  /** Open an existing session for appending at `lastSeq + 1` (its forest loaded first). */
  open(id: string, lastSeq: number, root: string): void {
    this.track(id, lastSeq, root);
  }

  /** Stop tracking a session whose agent left the live registry. Pending writes still commit. */
  release(id: string): void {
    const session = this.sessions.get(id);
    if (session === undefined) return;
    this.sessions.delete(id);
    const forest = this.forests.get(session.root);
    // A forest no session has open is forgotten; loadForest reads it back after pending writes commit.
    if (forest !== undefined && --forest.open <= 0 && !this.loadingForests.has(session.root)) this.forests.delete(session.root);
  }

  /**
   * Forget a forest this process no longer owns: its open sessions close, and its writes not
   * yet committed are dropped (their callers were or will be told the batch failed; nothing of
   * them was acknowledged). The database refuses them anyway (a fenced write).
   */
  dropForest(root: string): void {
    for (const [id, session] of this.sessions) if (session.root === root) this.sessions.delete(id);
    this.forests.delete(root);
    this.stripFailed([root]);
  }

  /**
   * Take these forests' writes out of the failed batch, which is retried ahead of every later
   * write: a write the database refuses for good (a fenced forest) must not block the others.
   */
  private stripFailed(roots: readonly string[]): void {
    const batch = this.failedBatch;
    if (batch === null) return;
    const gone = new Set(roots);
    batch.headers = batch.headers.filter((h) => !gone.has(h.rootSession ?? h.id));
    batch.entries = batch.entries.filter((e) => !gone.has(e.rootId));
    if (batch.pending !== undefined) {
      batch.pending = batch.pending.filter((op) => {
        const root = op.rootId ?? this.sessions.get(op.sessionId)?.root;
        return root === undefined || !gone.has(root);
      });
    }
  }

  isOpen(id: string): boolean {
    return this.sessions.has(id);
  }

  append(id: string, body: EntryBody): SessionEntry {
    const session = this.sessions.get(id);
    if (session === undefined) throw new Error(`session "${id}" is not open for appending`);
    const forest = this.forests.get(session.root);
    if (forest === undefined) throw new Error(`forest "${session.root}" of session "${id}" is not loaded`);
    const entry = { seq: session.seq + 1, ...body } as SessionEntry;
    session.seq = entry.seq;
    forest.seq += 1;
    const item: BatchEntry = { sessionId: id, entry, rootId: session.root, forestSeq: forest.seq };
    this.pending.entries.push(item);
    this.schedule();
    for (const observer of this.observers) observer.appended(item);
    return entry;
  }

  /** Be told of every header and entry as it is queued (see WriteObserver). */
  observe(observer: WriteObserver): void {
    this.observers.push(observer);
  }

  /** Hear about every committed batch, with how long the store took. Returns the unsubscribe. */
  subscribe(listener: CommitListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
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

  /** A session's header and last seq as committed (pending writes commit first). */
  async summary(id: string): Promise<SessionSummary | undefined> {
    await this.durable();
    return this.store.header(id);
  }

  /**
   * How a session's last turn was left, read from its last turn boundary: `open`, the entries
   * of a turn a stopped process did not close, from its turn-start on (empty when the last turn
   * was closed); `parkedThrough`, when the last turn ended with an interrupt that parked queued
   * messages (see turn-machine.ts `interrupt`).
   */
  async lastTurn(id: string): Promise<{ open: SessionEntry[]; parkedThrough: number | undefined }> {
    await this.durable();
    const boundary = await this.store.lastTurnBoundary(id);
    if (boundary === undefined) return { open: [], parkedThrough: undefined };
    if (boundary.type === 'turn-start') return { open: await this.store.read(id, boundary.seq - 1), parkedThrough: undefined };
    const [end] = await this.store.read(id, boundary.seq - 1, 1);
    return { open: [], parkedThrough: end?.type === 'turn-end' ? end.parkedThrough : undefined };
  }

  /** The latest compaction entry at or before `atOrBefore` (committed first). */
  async lastCompaction(id: string, atOrBefore: number): Promise<CompactionEntry | undefined> {
    await this.durable();
    return this.store.lastCompaction(id, atOrBefore);
  }

  /** The last seq assigned in an open session (undefined when it is not open). */
  lastSeq(id: string): number | undefined {
    return this.sessions.get(id)?.seq;
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

  private track(id: string, seq: number, root: string): void {
    const forest = this.forests.get(root);
    if (forest === undefined) throw new Error(`forest "${root}" is not loaded; open it with loadForest first`);
    this.sessions.set(id, { seq, root });
    forest.open += 1;
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
    const started = performance.now();
    this.store.write(toWrite).then(
      () => {
        this.failedBatch = null;
        const elapsed = performance.now() - started;
        const committed: WriteBatch = { headers: toWrite.headers, entries: toWrite.entries };
        if (toWrite.pending !== undefined) committed.pending = toWrite.pending;
        if (toWrite.idempotency !== undefined) committed.idempotency = toWrite.idempotency;
        for (const listener of this.listeners) {
          try {
            listener(committed, elapsed);
          } catch (error) {
            this.logger?.error({ err: error }, 'a commit listener failed');
          }
        }
        batch.settle();
      },
      (error: unknown) => {
        this.failedBatch = toWrite;
        let failure = error;
        if (isServiceError(error) && error.code === 'FOREST_FENCED') {
          // Refused for good: drop these forests' writes every time, then tell the owner.
          const roots = error.roots ?? [];
          this.stripFailed(roots);
          this.onFenced(roots);
          failure = new ServiceError('MISDIRECTED', FENCED_MESSAGE, { cause: error });
        }
        this.logger?.error({ err: error, entries: toWrite.entries.length }, 'session batch commit failed; will retry');
        batch.settle(failure);
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
