/**
 * In-memory session store: the same contract as the SQLite store, for tests and for
 * `AGENTFOREST_DATA=:memory:`. Entries and pending rows are kept as their JSON text, as the SQL
 * stores keep them: callers cannot mutate what was "persisted", and every read parses a fresh
 * copy. Beside each entry's text are the few fields the lookups need without parsing it.
 *
 * Invariants: a session's entries are its seqs 1, 2, 3... in order (planSeqs checks every
 * batch before anything is kept), and a forest's entries are in growing forest position. A
 * rejected batch leaves no trace.
 */
import type { EntryType, SessionEntry, SessionHeader } from '../../domain/session.js';
import {
  locationFromEntries,
  locationFromPending,
  planSeqs,
  type ActivationMark,
  type CompactionEntry,
  type BatchEntry,
  type IdempotencyRecord,
  type ListPosition,
  type MessageLocation,
  type PendingRow,
  type SessionStore,
  type SessionSummary,
  type StoredRoot,
  type TurnBoundary,
  type WriteBatch,
} from '../../sessions/session-store.js';
import { approvalRows } from '../approval-rows.js';
import { settingRows } from '../batch-rows.js';
import { MemoryApprovals } from './memory-approvals.js';
import { MemorySettings } from './memory-settings.js';
import { MemoryTenantUsage } from './memory-tenant-usage.js';
import { MemoryProviderLimits } from './memory-provider-limits.js';
import { MemoryWebhooks } from './memory-webhooks.js';

/** One committed entry: its JSON text, and what lookups read without parsing it. */
interface StoredEntry {
  readonly sessionId: string;
  readonly seq: number;
  readonly type: EntryType;
  readonly forestSeq: number;
  /** Set on message and turn-start entries. */
  readonly messageId: string | undefined;
  /** Set on turn-start, step-start and turn-end entries. */
  readonly turnId: string | undefined;
  readonly json: string;
}

interface StoredSession {
  header: SessionHeader;
  /** Its entries; entry `seq` is at index `seq - 1`. */
  entries: StoredEntry[];
}

interface StoredPending {
  position: number;
  json: string;
}

function storedEntry({ sessionId, entry, forestSeq }: BatchEntry): StoredEntry {
  return {
    sessionId,
    seq: entry.seq,
    type: entry.type,
    forestSeq,
    messageId: 'messageId' in entry ? entry.messageId : undefined,
    turnId: 'turnId' in entry ? entry.turnId : undefined,
    json: JSON.stringify(entry),
  };
}

const parse = (stored: StoredEntry): SessionEntry => JSON.parse(stored.json) as SessionEntry;

export class MemorySessionStore implements SessionStore {
  readonly kind = 'memory' as const;
  private readonly sessions = new Map<string, StoredSession>();
  /** Each parent's child sessions, in the order they were created. */
  private readonly childrenOf = new Map<string, StoredSession[]>();
  /** The root sessions, sorted by creation time, then id (the order of their list). */
  private readonly rootsInOrder: StoredSession[] = [];
  /** Each forest's entries, in forest order. */
  private readonly forests = new Map<string, StoredEntry[]>();
  private readonly pendingRows = new Map<string, Map<string, StoredPending>>();
  private readonly keys = new Map<string, IdempotencyRecord>();
  readonly webhooks = new MemoryWebhooks((rootId) => this.sessions.get(rootId)?.header.tenantId);
  readonly settings = new MemorySettings();
  readonly approvals = new MemoryApprovals();
  readonly tenantUsage = new MemoryTenantUsage();
  readonly providerLimits = new MemoryProviderLimits();

  async write(batch: WriteBatch): Promise<void> {
    planSeqs(batch, (id) => this.sessions.get(id)?.entries.length);
    // Encoded before anything is kept: a value with no JSON text rejects the batch whole.
    const settings = settingRows(batch.settings ?? []);
    const approvals = approvalRows(batch.entries);
    // Forest positions only grow, as the SQL stores' unique index enforces.
    const lastInForest = new Map<string, number>();
    for (const item of batch.entries) {
      const last = lastInForest.get(item.rootId) ?? this.lastPosition(item.rootId);
      if (item.forestSeq <= last) throw new Error(`forest "${item.rootId}" already has position ${item.forestSeq}`);
      lastInForest.set(item.rootId, item.forestSeq);
    }
    for (const header of batch.headers) {
      const session: StoredSession = { header: structuredClone(header), entries: [] };
      this.sessions.set(header.id, session);
      if (header.parentSession !== null) append(this.childrenOf, header.parentSession, session);
      else this.rootsInOrder.splice(this.firstRootAfter(header), 0, session);
    }
    for (const item of batch.entries) {
      const stored = storedEntry(item);
      this.sessions.get(item.sessionId)!.entries.push(stored);
      append(this.forests, item.rootId, stored);
    }
    this.approvals.apply(approvals);
    for (const change of batch.pending ?? []) {
      let rows = this.pendingRows.get(change.sessionId);
      if (change.op === 'put') {
        if (rows === undefined) this.pendingRows.set(change.sessionId, (rows = new Map()));
        rows.set(change.row.message.id, { position: change.row.position, json: JSON.stringify(change.row) });
      } else {
        rows?.delete(change.messageId);
        if (rows?.size === 0) this.pendingRows.delete(change.sessionId);
      }
    }
    for (const { rootId: _forest, ...record } of batch.idempotency ?? []) this.keys.set(`${record.sender}\u0000${record.key}`, structuredClone(record));
    this.webhooks.apply(batch.outbox ?? [], batch.webhooks ?? []);
    this.settings.apply(settings);
    this.tenantUsage.apply(batch.tenantUsage ?? []);
    this.providerLimits.apply(batch.providerLimits ?? []);
  }

  async header(id: string): Promise<SessionSummary | undefined> {
    const session = this.sessions.get(id);
    return session === undefined ? undefined : summary(session);
  }

  async read(id: string, after: number, limit?: number): Promise<SessionEntry[]> {
    const entries = this.sessions.get(id)?.entries ?? [];
    const start = Math.max(0, after);
    return entries.slice(start, limit === undefined ? undefined : start + limit).map(parse);
  }

  async lastTurnBoundary(id: string): Promise<TurnBoundary | undefined> {
    const last = this.lastOfSession(id, isTurnBoundary);
    if (last === undefined || (last.type !== 'turn-start' && last.type !== 'turn-end')) return undefined;
    return { type: last.type, turnId: last.turnId!, seq: last.seq };
  }

  async lastCompaction(id: string, atOrBefore: number): Promise<CompactionEntry | undefined> {
    const last = this.lastOfSession(id, (e) => e.type === 'compaction' && e.seq <= atOrBefore);
    return last === undefined ? undefined : (parse(last) as CompactionEntry);
  }

  async lastActivation(id: string): Promise<ActivationMark | undefined> {
    const last = this.lastOfSession(id, (e) => e.type === 'activation');
    if (last === undefined) return undefined;
    const entry = parse(last) as Extract<SessionEntry, { type: 'activation' }>;
    return { event: entry.event, seq: entry.seq };
  }

  async children(parentId: string): Promise<SessionSummary[]> {
    return (this.childrenOf.get(parentId) ?? []).map(summary);
  }

  async roots(after: ListPosition | undefined, limit: number): Promise<StoredRoot[]> {
    const start = after === undefined ? 0 : this.firstRootAfter(after);
    return this.rootsInOrder.slice(start, start + limit).map((session) => {
      const { id, createdAt, label, tenantId } = session.header;
      const last = session.entries.at(-1);
      const boundary = this.lastOfSession(id, isTurnBoundary);
      return {
        id,
        ...(label === undefined ? {} : { label }),
        ...(tenantId === undefined ? {} : { tenantId }),
        createdAt,
        lastEntryAt: last === undefined ? createdAt : parse(last).at,
        openTurn: boundary?.type === 'turn-start',
      };
    });
  }

  async readForest(rootId: string, after: number, limit: number): Promise<BatchEntry[]> {
    const forest = this.forests.get(rootId) ?? [];
    // Positions grow along the list: find the first after `after` by binary search.
    let lo = 0;
    let hi = forest.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (forest[mid]!.forestSeq <= after) lo = mid + 1;
      else hi = mid;
    }
    return forest.slice(lo, lo + limit).map((e) => ({ sessionId: e.sessionId, entry: parse(e), rootId, forestSeq: e.forestSeq }));
  }

  async lastForestSeq(rootId: string): Promise<number> {
    return this.lastPosition(rootId);
  }

  async pending(id: string): Promise<PendingRow[]> {
    const rows = [...(this.pendingRows.get(id)?.values() ?? [])].sort((a, b) => a.position - b.position);
    return rows.map((row) => JSON.parse(row.json) as PendingRow);
  }

  async locate(messageId: string): Promise<MessageLocation | undefined> {
    for (const [sessionId, rows] of this.pendingRows) {
      const row = rows.get(messageId);
      if (row !== undefined) return locationFromPending(sessionId, JSON.parse(row.json) as PendingRow);
    }
    // No index is kept, so a write pays nothing for receipt lookups: they scan the entries.
    for (const [sessionId, session] of this.sessions) {
      const named = session.entries.filter((e) => e.messageId === messageId);
      if (named.length === 0) continue;
      const start = named.find((e) => e.type === 'turn-start');
      const end = start === undefined ? undefined : session.entries.find((e) => e.type === 'turn-end' && e.turnId === start.turnId);
      return locationFromEntries(messageId, sessionId, named.map(parse), end === undefined ? undefined : parse(end));
    }
    return undefined;
  }

  async idempotency(sender: string, key: string, now: number): Promise<IdempotencyRecord | undefined> {
    const record = this.keys.get(`${sender}\u0000${key}`);
    return record !== undefined && record.expiresAt > now ? structuredClone(record) : undefined;
  }

  async expireIdempotency(now: number): Promise<number> {
    let n = 0;
    for (const [k, record] of this.keys) {
      if (record.expiresAt <= now) {
        this.keys.delete(k);
        n++;
      }
    }
    return n;
  }

  async ping(): Promise<void> {
    // Always here.
  }

  isUnavailable(): boolean {
    return false;
  }

  async close(): Promise<void> {
    // Nothing to release: the maps go with the process.
  }

  private lastPosition(rootId: string): number {
    return this.forests.get(rootId)?.at(-1)?.forestSeq ?? 0;
  }

  /** The index of the first root that comes after `position` in list order (binary search). */
  private firstRootAfter(position: ListPosition): number {
    let lo = 0;
    let hi = this.rootsInOrder.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const { createdAt, id } = this.rootsInOrder[mid]!.header;
      const before = createdAt < position.createdAt || (createdAt === position.createdAt && id <= position.id);
      if (before) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** A session's last entry that passes `wanted`. */
  private lastOfSession(id: string, wanted: (entry: StoredEntry) => boolean): StoredEntry | undefined {
    return this.sessions.get(id)?.entries.findLast(wanted);
  }
}

function isTurnBoundary(entry: StoredEntry): boolean {
  return entry.type === 'turn-start' || entry.type === 'turn-end';
}

function summary(session: StoredSession): SessionSummary {
  return { header: structuredClone(session.header), lastSeq: session.entries.length };
}

function append<T>(lists: Map<string, T[]>, key: string, item: T): void {
  const list = lists.get(key);
  if (list === undefined) lists.set(key, [item]);
  else list.push(item);
}
