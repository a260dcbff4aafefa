/**
 * The session log: the single writer in front of a SessionStore. It assigns each entry its
 * per-session `seq` synchronously (so the agent runtime can append inside the same synchronous
 * span as the state change it records) and commits everything appended in one event-loop turn
 * as one store batch (group commit). `durable(root)` resolves once everything appended before
 * the call is committed; routes await it before they acknowledge, so an acknowledged write is on
 * disk. Only sessions of live agents keep a seq counter in memory.
 *
 * Each entry also gets a forest-wide `forestSeq` (gap-free per root), the id of forest event
 * streams. Committed batches are announced to subscribers (event streams, metrics).
 *
 * A failed batch is kept and retried ahead of later writes, so the on-disk order never differs
 * from the assigned order; callers waiting on it are told STORE_UNAVAILABLE (their write lands
 * once the store is back). It is retried on the next write, and by a timer while nothing else
 * writes, so the log heals by itself once the store can write again; reads meanwhile see what
 * is committed (nothing of a failed batch was acknowledged). A batch the store committed
 * without the rows of forests it refused (this instance lost their lease) is not retried: the
 * waiters of those forests are told MISDIRECTED, everyone else's writes committed and they are
 * answered normally (pending-batch.ts).
 */
import type { Logger } from 'pino';
import type { EntryBody, SessionEntry, SessionHeader } from '../domain/session.js';
import { withoutForests } from './batch-forests.js';
import { COMMITTED, emptyBatch, fencedWrite, mergeBatches, refusedWaiter, storeUnavailable, type CommitResult, type PendingBatch } from './pending-batch.js';
import type { OutboxEvent, WebhookChange } from './outbox.js';
import type { SettingChange } from './settings.js';
import type { TenantUsageRow } from './tenant-usage.js';
import type { ProviderLimitRow } from './provider-limit-rows.js';
import { batchIsEmpty, type BatchEntry, type CompactionEntry, type IdempotencyRecord, type PendingOp, type SessionStore, type SessionSummary, type WriteBatch } from './session-store.js';


/** The first retry of a failed batch, doubled after each failure up to the last. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 2_000;

/**
 * What the log tells those who watch it: every header and entry as it is queued, in the
 * synchronous span that queues it (before it commits), so what follows from an entry can be in
 * force at once, as a step's charge to its budget is; and every batch once it committed.
 */
export interface LogObserver {
  headerQueued?(header: SessionHeader): void;
  entryQueued?(item: BatchEntry): void;
  /** `elapsedMs`: how long the store took. */
  committed?(batch: WriteBatch, elapsedMs: number): void;
}

export class SessionLog {
  /** Open sessions: their last seq and their forest's root. */
  private readonly sessions = new Map<string, { seq: number; root: string }>();
  /**
   * Forests with a session open here: the last forestSeq assigned and how many sessions are
   * open. Forgotten when the last one closes (a disposed forest leaves nothing here); loading
   * it again reads its last position back once the writes queued before have committed, so a
   * position is never handed out twice.
   */
  private readonly forests = new Map<string, { seq: number; open: number }>();
  /** Forest loads in flight, shared by concurrent callers. */
  private readonly loadingForests = new Map<string, Promise<void>>();
  private pending: PendingBatch = emptyBatch();
  private inflight: PendingBatch | null = null;
  private scheduled = false;
  private failedBatch: WriteBatch | null = null;
  /** Failed commits in a row, and the timer that retries the failed batch. */
  private failures = 0;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly store: SessionStore,
    private readonly logger?: Logger,
    /** Called with the roots of a write the database refused because their lease was lost. */
    private readonly onFenced: (roots: readonly string[]) => void = () => undefined,
    private readonly observer: LogObserver = {},
  ) {}

  /** Queue a new session's header; its entries start at seq 1. A child's forest must be open. */
  create(header: SessionHeader): void {
    if (this.sessions.has(header.id)) throw new Error(`session "${header.id}" is already open`);
    const root = header.rootSession ?? header.id;
    if (root === header.id && !this.forests.has(root)) this.forests.set(root, { seq: 0, open: 0 });
    this.track(header.id, 0, root);
    this.pending.headers.push(header);
    this.schedule();
    this.observer.headerQueued?.(header);
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
        await this.durable(root);
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
    this.stripFailed([root]);
    for (const [id, session] of this.sessions) if (session.root === root) this.sessions.delete(id);
    this.forests.delete(root);
  }

  /**
   * Take these forests' writes out of the failed batch, which is retried ahead of every later
   * write: a write the database refuses for good (a fenced forest) must not block the others.
   */
  private stripFailed(roots: readonly string[]): void {
    if (this.failedBatch !== null) this.failedBatch = withoutForests(this.failedBatch, new Set(roots), this.rootOfSession);
  }

  private readonly rootOfSession = (id: string): string | undefined => this.sessions.get(id)?.root;

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
    this.observer.entryQueued?.(item);
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

  /** Record an idempotent result in the same batch as the writes it describes (its `rootId` their forest). */
  putIdempotency(record: IdempotencyRecord): void {
    (this.pending.idempotency ??= []).push(record);
    this.schedule();
  }

  /**
   * Queue a webhook event in the same batch as the writes that caused it (appended so far, in
   * the same synchronous span), so the store commits its deliveries with them or not at all.
   */
  queueEvent(event: OutboxEvent): void {
    (this.pending.outbox ??= []).push(event);
    this.schedule();
  }

  /** Change webhook subscriptions or delivery states in the next batch (see WebhookChange). */
  changeWebhooks(change: WebhookChange): void {
    (this.pending.webhooks ??= []).push(change);
    this.schedule();
  }

  /** Put or delete an operator setting in the next batch (see SettingChange); it belongs to no forest. */
  changeSettings(change: SettingChange): void {
    (this.pending.settings ??= []).push(change);
    this.schedule();
  }

  /** Put this instance's tenant usage rows in the next batch (tenant-usage.ts); they belong to no forest. */
  putTenantUsage(rows: readonly TenantUsageRow[]): void {
    (this.pending.tenantUsage ??= []).push(...rows);
    this.schedule();
  }

  /** Put providers' back-offs and this instance's request windows in the next batch (provider-limit-rows.ts). */
  putProviderLimits(rows: readonly ProviderLimitRow[]): void {
    (this.pending.providerLimits ??= []).push(...rows);
    this.schedule();
  }

  /**
   * Resolves when every write queued before this call is committed, for a caller that wrote to
   * forest `root`: it rejects when the store failed, or with MISDIRECTED when the store refused
   * that forest (another instance owns it now; nothing of its writes landed). A refusal of other
   * forests does not concern it. Without `root` it stands for writes to any forest, so it rejects
   * when the store refused any forest of the commits it waited for.
   */
  durable(root?: string): Promise<void> {
    const result = this.lastResult();
    if (result === undefined) return Promise.resolve();
    return result.then((r) => {
      if (r.kind === 'failed') throw r.error;
      if (r.refused.size === 0) return;
      if (root === undefined) throw refusedWaiter([...r.refused]);
      if (r.refused.has(root)) throw refusedWaiter([...r.refused], root);
    });
  }

  /**
   * Resolves when every write queued before this call was settled by the store: committed,
   * refused for a forest this instance lost, or failed (neither was acknowledged). A read after
   * it sees every acknowledged write. It never rejects and never forces a retry of a failed
   * batch, so reads go on while the store cannot write.
   */
  settled(): Promise<void> {
    const result = batchIsEmpty(this.pending) ? this.inflight?.result : this.pending.result;
    return result === undefined ? Promise.resolve() : result.then(() => undefined);
  }

  /** Whether the store is taking writes: false from a failed commit until one succeeds. */
  get storeWritable(): boolean {
    return this.failedBatch === null;
  }

  /** The result of the last commit holding what was queued so far; undefined when all of it committed. */
  private lastResult(): Promise<CommitResult> | undefined {
    if (!batchIsEmpty(this.pending)) return this.pending.result;
    // A failed batch is not durable: retry it now rather than report success.
    if (this.inflight === null && this.failedBatch !== null) this.commitNow();
    return this.inflight?.result;
  }

  /** A session's header and last seq as committed (pending writes settled first). */
  async summary(id: string): Promise<SessionSummary | undefined> {
    await this.settled();
    return this.store.header(id);
  }

  /**
   * How a session's last turn was left, read from its last turn boundary: `open`, the entries
   * of a turn a stopped process did not close, from its turn-start on (empty when the last turn
   * was closed); `parkedThrough`, when the last turn ended with an interrupt that parked queued
   * messages (see turn-machine.ts `interrupt`).
   */
  async lastTurn(id: string): Promise<{ open: SessionEntry[]; parkedThrough: number | undefined }> {
    await this.settled();
    const boundary = await this.store.lastTurnBoundary(id);
    if (boundary === undefined) return { open: [], parkedThrough: undefined };
    if (boundary.type === 'turn-start') return { open: await this.store.read(id, boundary.seq - 1), parkedThrough: undefined };
    const [end] = await this.store.read(id, boundary.seq - 1, 1);
    return { open: [], parkedThrough: end?.type === 'turn-end' ? end.parkedThrough : undefined };
  }

  /** The latest compaction entry at or before `atOrBefore` (pending writes settled first). */
  async lastCompaction(id: string, atOrBefore: number): Promise<CompactionEntry | undefined> {
    await this.settled();
    return this.store.lastCompaction(id, atOrBefore);
  }

  /** The last seq assigned in an open session (undefined when it is not open). */
  lastSeq(id: string): number | undefined {
    return this.sessions.get(id)?.seq;
  }

  /** Entries after `after` (pending writes settled first, so reads see every acknowledged write). */
  async read(id: string, after: number, limit?: number): Promise<SessionEntry[]> {
    await this.settled();
    return this.store.read(id, after, limit);
  }

  /**
   * Commit everything pending (a failed batch included) now and wait for it; rejects when the
   * store failed, not when it refused a forest.
   */
  async flush(): Promise<void> {
    const done = this.lastResult();
    this.commitNow();
    const result = await done;
    if (result?.kind === 'failed') throw result.error;
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

  /** Retry the failed batch after a backoff, unless a write retries it first. */
  private scheduleRetry(): void {
    if (this.retryTimer !== undefined) return;
    const delay = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.min(this.failures - 1, 10));
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (this.failedBatch !== null) this.commitNow();
    }, delay);
    // A process may stop while its store is down: the kept batch is then lost unacknowledged.
    this.retryTimer.unref();
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
      (outcome) => {
        if (this.failures > 0) this.logger?.warn({ failedCommits: this.failures }, 'the session store takes writes again; the kept writes committed');
        this.failedBatch = null;
        this.failures = 0;
        const elapsed = performance.now() - started;
        const refused = outcome?.refused ?? [];
        const committed = refused.length === 0 ? writesOf(toWrite) : withoutForests(toWrite, new Set(refused), this.rootOfSession);
        try {
          this.observer.committed?.(committed, elapsed);
        } catch (error) {
          this.logger?.error({ err: error }, 'an observer of a commit failed');
        }
        if (refused.length > 0) {
          // Refused for good, and left out: the rest committed. Tell the owner, then the waiters.
          this.logger?.error({ err: fencedWrite(refused), roots: refused }, 'a commit left out the writes of forests another instance took over');
          this.onFenced(refused);
        }
        batch.settle(refused.length === 0 ? COMMITTED : { kind: 'committed', refused: new Set(refused) });
      },
      (error: unknown) => {
        this.failedBatch = toWrite;
        this.failures += 1;
        // The first failure with its stack; the retries of one outage each on one line.
        if (this.failures === 1) this.logger?.error({ err: error, entries: toWrite.entries.length }, 'session batch commit failed; kept and retried');
        else this.logger?.warn({ error: errorText(error), failedCommits: this.failures, entries: toWrite.entries.length }, 'session batch commit failed again; kept and retried');
        batch.settle({ kind: 'failed', error: storeUnavailable(error) });
        this.scheduleRetry();
      },
    ).finally(() => {
      this.inflight = null;
      if (!batchIsEmpty(this.pending)) this.commitNow();
    });
  }
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The writes of a batch, without what the log keeps beside them. */
function writesOf(batch: WriteBatch): WriteBatch {
  const writes: WriteBatch = { headers: batch.headers, entries: batch.entries };
  if (batch.pending !== undefined) writes.pending = batch.pending;
  if (batch.idempotency !== undefined) writes.idempotency = batch.idempotency;
  if (batch.outbox !== undefined) writes.outbox = batch.outbox;
  if (batch.webhooks !== undefined) writes.webhooks = batch.webhooks;
  if (batch.settings !== undefined) writes.settings = batch.settings;
  if (batch.tenantUsage !== undefined) writes.tenantUsage = batch.tenantUsage;
  if (batch.providerLimits !== undefined) writes.providerLimits = batch.providerLimits;
  return writes;
}
