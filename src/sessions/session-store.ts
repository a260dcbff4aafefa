/**
 * The durable session store port. Implementations, under src/adapters/: memory-store.ts
 * (tests, `:memory:`), sqlite-store.ts (the default) and postgres-store.ts (several
 * instances). A store persists headers and entries; it never decides seq numbers (the session log does) but
 * rejects a batch that would leave a gap or a duplicate, so the log on disk is always gap-free.
 */
import type { Message, ReceiptState } from '../domain/message.js';
import type { PendingRowValue } from '../domain/pending-rows.js';
import type { CompactionEntry, SessionEntry, SessionHeader } from '../domain/session.js';
import type { OutboxEvent, WebhookChange, WebhookReads } from './outbox.js';
import type { SettingChange, SettingReads } from './settings.js';
import type { TenantUsageReads, TenantUsageRow } from './tenant-usage.js';
import type { ProviderLimitReads, ProviderLimitRow } from './provider-limit-rows.js';
import type { ApprovalReads } from './approvals.js';

export type { CompactionEntry } from '../domain/session.js';

/** The kinds of pending rows, defined once in the domain (domain/pending-rows.ts). */
export { PENDING_ROW_KINDS as PENDING_KINDS, type PendingRowKind as PendingKind } from '../domain/pending-rows.js';

/** An accepted message not yet in the log: a queued or steering inbox item, or staged context. */
export type PendingRow = PendingRowValue;

/** A change to a pending row; `rootId` names the session's forest (set by the runtime). */
export type PendingOp =
  | { op: 'put'; sessionId: string; rootId?: string; row: PendingRow }
  | { op: 'delete'; sessionId: string; rootId?: string; messageId: string };

/** A stored idempotent result: the same key from the same sender replays it. */
export interface IdempotencyRecord {
  /** Who sent it: `operator`, or the sending agent's id. */
  sender: string;
  key: string;
  /** The route and body the key was first used with (a hash). */
  fingerprint: string;
  status: number;
  response: unknown;
  createdAt: number;
  expiresAt: number;
  /**
   * The forest whose writes the result describes (not stored): the record is fenced and left
   * out with that forest's rows, so a key never replays an effect that did not commit.
   */
  rootId?: string;
}

export interface BatchEntry {
  sessionId: string;
  entry: SessionEntry;
  /** The forest (root session) the entry belongs to, and its gap-free position there. */
  rootId: string;
  forestSeq: number;
}

export interface WriteBatch {
  headers: SessionHeader[];
  entries: BatchEntry[];
  /** Changes to pending rows, applied in order after the entries. */
  pending?: PendingOp[];
  idempotency?: IdempotencyRecord[];
  /** Webhook events the batch's writes caused: the store adds a delivery per matching subscription. */
  outbox?: OutboxEvent[];
  /** Changes to webhook subscriptions and delivery states, applied after the outbox events. */
  webhooks?: WebhookChange[];
  /** Changes to operator settings, applied in order (see settings.ts); they belong to no forest. */
  settings?: SettingChange[];
  /** This instance's tenant usage rows, put whole (tenant-usage.ts); they belong to no forest. */
  tenantUsage?: TenantUsageRow[];
  /** Providers' back-offs and this instance's request windows (provider-limit-rows.ts); they belong to no forest. */
  providerLimits?: ProviderLimitRow[];
}

/** Where a message is, from durable state. */
export interface MessageLocation {
  messageId: string;
  sessionId: string;
  state: ReceiptState;
  /** The message as accepted or as logged. */
  message: Pick<Message, 'role' | 'source'>;
  acceptedAt?: string;
  appendedAt?: string;
  turnId?: string;
  turnStartedAt?: string;
  turnEndedAt?: string;
  seq?: number;
}

export interface SessionSummary {
  header: SessionHeader;
  lastSeq: number;
}

export interface TurnBoundary {
  type: 'turn-start' | 'turn-end';
  turnId: string;
  seq: number;
}

/** Where a page of a list ordered by creation time, then id, starts: after this (createdAt, id). */
export interface ListPosition {
  createdAt: string;
  id: string;
}

/** A root session as the list of roots to resume shows it, read without its entries. */
export interface StoredRoot {
  id: string;
  label?: string;
  /** The tenant it belongs to; absent: made with an admin key. */
  tenantId?: string;
  createdAt: string;
  /** When its last entry was written; its creation time when it has none. */
  lastEntryAt: string;
  /** Its last turn boundary is a turn-start: a process stopped while that turn was open. */
  openTurn: boolean;
}

export interface ActivationMark {
  event: 'created' | 'resumed' | 'settled' | 'closed';
  seq: number;
}

/**
 * A write that committed without some of its rows: the forests this instance no longer owns
 * (another instance holds their lease), whose every row the store left out (batch-forests.ts).
 */
export interface WriteOutcome {
  refused: readonly string[];
}

export interface SessionStore {
  readonly kind: 'memory' | 'sqlite' | 'postgres';
  /**
   * Writes one batch atomically: all headers and entries, or nothing. A store that fences
   * forests (PostgreSQL with leases) leaves out the rows of forests it refuses, commits the rest
   * in the same transaction and names those forests; the others never refuse (void).
   */
  write(batch: WriteBatch): Promise<WriteOutcome | void>;
  header(id: string): Promise<SessionSummary | undefined>;
  /** Entries with `seq > after`, in order, at most `limit` (no limit when omitted). */
  read(id: string, after: number, limit?: number): Promise<SessionEntry[]>;
  /** The latest turn-start or turn-end entry, to find a turn left open by a stop. */
  lastTurnBoundary(id: string): Promise<TurnBoundary | undefined>;
  /** The latest compaction entry at or before `atOrBefore`: where a step's messages start. */
  lastCompaction(id: string, atOrBefore: number): Promise<CompactionEntry | undefined>;
  /** The latest activation entry: tells a settled child from one closed for good. */
  lastActivation(id: string): Promise<ActivationMark | undefined>;
  /** Sessions whose header names `parentId` as parent, in creation order. */
  children(parentId: string): Promise<SessionSummary[]>;
  /**
   * Root sessions (no parent) after `after` in creation order, then id, at most `limit`: a
   * keyset page, so a page costs the same however many roots come before it.
   */
  roots(after: ListPosition | undefined, limit: number): Promise<StoredRoot[]>;
  /** The session's pending rows (queued, steering, staged), in order. */
  pending(id: string): Promise<PendingRow[]>;
  /** A forest's entries with `forestSeq > after`, in forest order. */
  readForest(rootId: string, after: number, limit: number): Promise<BatchEntry[]>;
  /** The last forestSeq of a forest (0 when it has none). */
  lastForestSeq(rootId: string): Promise<number>;
  /** Where a message is: pending, in a log, as a turn's prompt. */
  locate(messageId: string): Promise<MessageLocation | undefined>;
  /** An unexpired idempotency record, or undefined. */
  idempotency(sender: string, key: string, now: number): Promise<IdempotencyRecord | undefined>;
  /** Drop idempotency records that expired before `now`; returns how many. */
  expireIdempotency(now: number): Promise<number>;
  /** Webhook subscriptions and the outbox. */
  readonly webhooks: WebhookReads;
  /** Operator settings (tool servers, backend tools...). */
  readonly settings: SettingReads;
  /** What each instance spent for each tenant in the current windows. */
  readonly tenantUsage: TenantUsageReads;
  /** The providers' back-offs and each instance's request windows. */
  readonly providerLimits: ProviderLimitReads;
  /** The approvals index: every approval's last entry, across forests (approvals.ts). */
  readonly approvals: ApprovalReads;
  /**
   * Resolves once the store answered a trivial query; rejects when it cannot be reached (a
   * database server that is down). Readiness asks it.
   */
  ping(): Promise<void>;
  /**
   * Whether an error this store threw means it cannot be reached or cannot write (a database
   * server down, a full disk, an I/O error) rather than a fault of the request: answered 503
   * STORE_UNAVAILABLE, not 500.
   */
  isUnavailable(error: unknown): boolean;
  close(): Promise<void>;
}

export function batchIsEmpty(batch: WriteBatch): boolean {
  return (
    batch.headers.length === 0 &&
    batch.entries.length === 0 &&
    (batch.pending?.length ?? 0) === 0 &&
    (batch.idempotency?.length ?? 0) === 0 &&
    (batch.outbox?.length ?? 0) === 0 &&
    (batch.webhooks?.length ?? 0) === 0 &&
    (batch.settings?.length ?? 0) === 0 &&
    (batch.tenantUsage?.length ?? 0) === 0 &&
    (batch.providerLimits?.length ?? 0) === 0
  );
}

/** Receipt of a logged message from its entries: the message entry and, for a prompt, its turn. */
export function locationFromEntries(
  messageId: string,
  sessionId: string,
  entries: readonly SessionEntry[],
  turnEnd: SessionEntry | undefined,
): MessageLocation | undefined {
  const message = entries.find((e) => e.type === 'message');
  const turnStart = entries.find((e) => e.type === 'turn-start');
  if (message === undefined || message.type !== 'message') return undefined;
  const location: MessageLocation = {
    messageId,
    sessionId,
    state: 'appended',
    message: { role: message.role, source: message.source },
    appendedAt: message.at,
    seq: message.seq,
  };
  if (turnStart !== undefined && turnStart.type === 'turn-start') {
    location.turnId = turnStart.turnId;
    location.turnStartedAt = turnStart.at;
    location.state = 'turn-started';
    if (turnEnd !== undefined) {
      location.turnEndedAt = turnEnd.at;
      location.state = 'turn-ended';
    }
  }
  return location;
}

/** Receipt of a pending message. */
export function locationFromPending(sessionId: string, row: PendingRow): MessageLocation {
  return {
    messageId: row.message.id,
    sessionId,
    state: row.kind === 'staged' ? 'staged' : 'queued',
    message: { role: row.message.role, source: row.message.source },
    acceptedAt: row.acceptedAt,
  };
}

/** Checks a batch against the current last seq of each session; returns the new last seqs. */
export function planSeqs(
  batch: WriteBatch,
  lastSeqOf: (id: string) => number | undefined,
): Map<string, number> {
  const next = new Map<string, number>();
  for (const header of batch.headers) {
    if (lastSeqOf(header.id) !== undefined || next.has(header.id)) {
      throw new Error(`session "${header.id}" already exists`);
    }
    next.set(header.id, 0);
  }
  for (const { sessionId, entry } of batch.entries) {
    const last = next.get(sessionId) ?? lastSeqOf(sessionId);
    if (last === undefined) throw new Error(`session "${sessionId}" does not exist`);
    if (entry.seq !== last + 1) {
      throw new Error(`session "${sessionId}" expected seq ${last + 1}, got ${entry.seq}`);
    }
    next.set(sessionId, entry.seq);
  }
  return next;
}
