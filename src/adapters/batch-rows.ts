/**
 * A `WriteBatch` as rows of primitives (JSON text included), the form both SQL stores start
 * from: it crosses a thread boundary as strings and numbers, and binds to statements as is.
 */
import type { WriteBatch } from '../sessions/session-store.js';
import type { WebhookChange } from '../sessions/outbox.js';
import type { SettingChange } from '../sessions/settings.js';
import type { TenantUsageRow } from '../sessions/tenant-usage.js';
import type { ProviderLimitRow } from '../sessions/provider-limit-rows.js';
import { approvalRows, type ApprovalRow } from './approval-rows.js';

export type SessionRow = [id: string, kind: string, parent: string | null, createdAt: string, header: string];
/** One entry; `body` is the entry without `seq`, as JSON. */
export type EntryRow = [sessionId: string, seq: number, type: string, body: string, messageId: string | null, turnId: string | null, rootId: string, forestSeq: number];
export type PendingChangeRow =
  | [sessionId: string, messageId: string]
  | [sessionId: string, messageId: string, position: number, kind: string, itemId: string | null, message: string, acceptedAt: string];
export type IdempotencyRow = [sender: string, key: string, fingerprint: string, status: number, response: string, createdAt: number, expiresAt: number];
export type OutboxRow = [eventId: string, type: string, rootId: string, at: number, payload: string];
/** A setting deleted, or put with its value as JSON text. */
export type SettingRow = [kind: string, name: string] | [kind: string, name: string, value: string, updatedAt: string];

export interface BatchRows {
  sessions: SessionRow[];
  entries: EntryRow[];
  pending: PendingChangeRow[];
  idempotency: IdempotencyRow[];
  outbox: OutboxRow[];
  /** Plain objects of primitives already: they cross a thread boundary as they are. */
  webhooks: WebhookChange[];
  /** In the order the batch changes them. */
  settings: SettingRow[];
  /** The approvals index rows the batch's `approval` entries put: one per id, its last entry's (approval-rows.ts). */
  approvals: ApprovalRow[];
  /** Plain objects of primitives already; the last row per (instance, tenant) wins. */
  tenantUsage: TenantUsageRow[];
  /** Plain objects of primitives already, in the order put. */
  providerLimits: ProviderLimitRow[];
}

export function encodeRows(batch: WriteBatch): BatchRows {
  return {
    sessions: batch.headers.map((h) => [h.id, h.kind, h.parentSession, h.createdAt, JSON.stringify(h)]),
    entries: batch.entries.map(({ sessionId, entry, rootId, forestSeq }) => {
      const { seq, ...body } = entry;
      const messageId = 'messageId' in entry ? entry.messageId : null;
      const turnId = 'turnId' in entry ? entry.turnId : null;
      return [sessionId, seq, entry.type, JSON.stringify(body), messageId, turnId, rootId, forestSeq];
    }),
    pending: (batch.pending ?? []).map((change): PendingChangeRow => {
      if (change.op === 'delete') return [change.sessionId, change.messageId];
      const r = change.row;
      return [change.sessionId, r.message.id, r.position, r.kind, r.itemId, JSON.stringify(r.message), r.acceptedAt];
    }),
    idempotency: (batch.idempotency ?? []).map((r) => [r.sender, r.key, r.fingerprint, r.status, JSON.stringify(r.response), r.createdAt, r.expiresAt]),
    outbox: (batch.outbox ?? []).map((e) => [e.id, e.type, e.rootId, e.at, e.payload]),
    webhooks: batch.webhooks ?? [],
    settings: settingRows(batch.settings ?? []),
    approvals: approvalRows(batch.entries),
    tenantUsage: batch.tenantUsage ?? [],
    providerLimits: batch.providerLimits ?? [],
  };
}

/**
 * Per session, the seq a batch continues from and the seq it ends at, from the runs of seqs it
 * writes in order (one entry, or a chunk of them); throws on a gap between them. The store
 * then advances `last_seq` from `from` to `to` by compare-and-set.
 */
export function seqAdvances(runs: Iterable<readonly [sessionId: string, firstSeq: number, lastSeq: number, ...rest: unknown[]]>): Map<string, { from: number; to: number }> {
  const advance = new Map<string, { from: number; to: number }>();
  for (const [sessionId, firstSeq, lastSeq] of runs) {
    const range = advance.get(sessionId);
    if (range === undefined) advance.set(sessionId, { from: firstSeq - 1, to: lastSeq });
    else if (firstSeq !== range.to + 1) throw new Error(`session "${sessionId}" batch has a gap at seq ${firstSeq}`);
    else range.to = lastSeq;
  }
  return advance;
}

/** Setting changes as rows; throws (rejecting the whole batch) on a value that has no JSON text. */
export function settingRows(changes: readonly SettingChange[]): SettingRow[] {
  return changes.map((change): SettingRow => {
    if (change.op === 'delete') return [change.kind, change.name];
    const { kind, name, value, updatedAt } = change.setting;
    const text = JSON.stringify(value) as string | undefined;
    if (text === undefined) throw new Error(`setting "${kind}/${name}" has no JSON value`);
    return [kind, name, text, updatedAt];
  });
}
