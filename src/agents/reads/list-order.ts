/**
 * The order of agent lists and their cursors: creation time, then id; a cursor is the
 * (createdAt, id) of the last item, so a page never repeats or skips an agent that existed
 * when the first page was read. One instance's list and the cluster's merged one use it alike.
 */
import type { AgentView } from '../../contract/index.js';
import { ServiceError } from '../../domain/errors.js';

/** What lists are ordered by: creation time, then id (a view and a session header both have them). */
export type OrderKey = Pick<AgentView, 'createdAt' | 'id'>;

export function compareOrder(a: OrderKey, b: OrderKey): number {
  if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** The first `limit` of `sorted` as views, and the cursor after them when more follow. */
export function pageOf<T, V extends OrderKey = AgentView>(sorted: readonly T[], limit: number, view: (item: T) => V): { items: V[]; nextCursor: string | null } {
  const items = sorted.slice(0, limit).map(view);
  const last = items[items.length - 1];
  return { items, nextCursor: sorted.length > limit && last !== undefined ? encodeCursor(last) : null };
}

export function encodeCursor(last: OrderKey): string {
  return Buffer.from(JSON.stringify({ createdAt: last.createdAt, id: last.id })).toString('base64url');
}

export function decodeCursor(cursor: string): { createdAt: string; id: string } {
  try {
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (typeof parsed === 'object' && parsed !== null && 'createdAt' in parsed && 'id' in parsed) {
      const { createdAt, id } = parsed as { createdAt: unknown; id: unknown };
      if (typeof createdAt === 'string' && typeof id === 'string') return { createdAt, id };
    }
  } catch {
    // fall through: a cursor that does not decode is a client error
  }
  throw new ServiceError('VALIDATION', 'cursor is not a cursor this service returned');
}
