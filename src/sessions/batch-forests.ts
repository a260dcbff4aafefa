/**
 * Which forest each row of a write batch belongs to, so a store that fences forests can leave
 * one forest's rows out and commit the rest, and the session log can tell its listeners exactly
 * what committed. A header belongs to its root (`rootSession`, or itself); an entry names its
 * root; a pending change names it (`rootId`) or belongs to a session the batch creates, else
 * `rootOfSession` is asked; an idempotency record belongs to the forest it names, and so do an
 * outbox event and a delivery's state change. A row whose
 * forest cannot be told belongs to none: it is never fenced and never left out. An operator
 * setting belongs to none by its nature.
 */
import type { PendingOp, WriteBatch } from './session-store.js';
import { changeRoot } from './outbox.js';

/** The forest of a session the batch neither creates nor names, when known. */
export type RootOfSession = (sessionId: string) => string | undefined;

/** Sessions the batch creates, with their forest. */
function createdRoots(batch: WriteBatch): Map<string, string> {
  return new Map(batch.headers.map((h) => [h.id, h.rootSession ?? h.id]));
}

function pendingRoot(op: PendingOp, created: ReadonlyMap<string, string>, rootOfSession: RootOfSession): string | undefined {
  return op.rootId ?? created.get(op.sessionId) ?? rootOfSession(op.sessionId);
}

/** Pending changes whose forest neither they nor the batch's headers name: what a store must look up. */
export function unattributedSessions(batch: WriteBatch): string[] {
  const created = createdRoots(batch);
  const ids = new Set<string>();
  for (const op of batch.pending ?? []) if (op.rootId === undefined && !created.has(op.sessionId)) ids.add(op.sessionId);
  return [...ids];
}

/** Every forest the batch writes a row of. */
export function forestsOf(batch: WriteBatch, rootOfSession: RootOfSession): Set<string> {
  const created = createdRoots(batch);
  const roots = new Set(created.values());
  for (const e of batch.entries) roots.add(e.rootId);
  for (const op of batch.pending ?? []) {
    const root = pendingRoot(op, created, rootOfSession);
    if (root !== undefined) roots.add(root);
  }
  for (const record of batch.idempotency ?? []) if (record.rootId !== undefined) roots.add(record.rootId);
  for (const event of batch.outbox ?? []) roots.add(event.rootId);
  for (const change of batch.webhooks ?? []) {
    const root = changeRoot(change);
    if (root !== undefined) roots.add(root);
  }
  return roots;
}

/** The batch without the rows of these forests; a new batch, the given one is not changed. */
export function withoutForests(batch: WriteBatch, gone: ReadonlySet<string>, rootOfSession: RootOfSession): WriteBatch {
  const created = createdRoots(batch);
  const kept: WriteBatch = {
    headers: batch.headers.filter((h) => !gone.has(h.rootSession ?? h.id)),
    entries: batch.entries.filter((e) => !gone.has(e.rootId)),
  };
  if (batch.pending !== undefined) {
    kept.pending = batch.pending.filter((op) => {
      const root = pendingRoot(op, created, rootOfSession);
      return root === undefined || !gone.has(root);
    });
  }
  if (batch.idempotency !== undefined) kept.idempotency = batch.idempotency.filter((r) => r.rootId === undefined || !gone.has(r.rootId));
  if (batch.outbox !== undefined) kept.outbox = batch.outbox.filter((e) => !gone.has(e.rootId));
  if (batch.webhooks !== undefined) {
    kept.webhooks = batch.webhooks.filter((c) => {
      const root = changeRoot(c);
      return root === undefined || !gone.has(root);
    });
  }
  if (batch.settings !== undefined) kept.settings = batch.settings;
  if (batch.tenantUsage !== undefined) kept.tenantUsage = batch.tenantUsage;
  if (batch.providerLimits !== undefined) kept.providerLimits = batch.providerLimits;
  return kept;
}
