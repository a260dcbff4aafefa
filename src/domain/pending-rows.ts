/**
 * Pending rows: the durable copy of what an agent accepted and has not yet logged (queued and
 * steering inbox items, staged context), so a later incarnation can restore it. The turn
 * machine emits the row changes of each transition (`RowOp`); the runtime hands them to the
 * store in the same synchronous span as the transition's log entries.
 *
 * Invariants:
 * - one row per accepted message, put when the message is accepted and deleted when it is
 *   logged or discarded;
 * - positions order the rows for restore: a new row goes after every other (`highest + 1`);
 *   steering items that found no step and become the next prompts move to the front, in order
 *   (`lowest - n` … `lowest - 1`);
 * - `acceptedAt` is the time the message was first accepted: a moved row keeps it.
 */
import type { Message } from './message.js';

/**
 * `queued`: an inbox item; `wakeup`: a queued item that later wakeups may join; `joined`: a
 * wakeup that joins the item ahead of it into one turn; `steering`; `staged` context.
 */
export const PENDING_ROW_KINDS = ['queued', 'wakeup', 'joined', 'steering', 'staged'] as const;
export type PendingRowKind = (typeof PENDING_ROW_KINDS)[number];

/** Where an accepted message's row sits, and when the message was first accepted. */
export interface RowPlace {
  readonly position: number;
  readonly acceptedAt: string;
}

/** One pending row as the store keeps it. */
export interface PendingRowValue extends RowPlace {
  kind: PendingRowKind;
  /** The inbox item id (every kind but staged); null for staged context. */
  itemId: string | null;
  message: Message;
}

/** A pending-row effect: write a row at its position (new or moved), or delete one. */
export type RowOp = { op: 'put'; row: PendingRowValue } | { op: 'delete'; messageId: string };

/** The lowest and highest position handed out so far (restored rows included). */
export interface RowBounds {
  readonly lowest: number;
  readonly highest: number;
}

export const NO_ROWS: RowBounds = { lowest: 0, highest: -1 };

/** What rows need of an inbox item (turn-machine.ts's `InboxItem` has this shape). */
export interface RowItem {
  id: string;
  placement: 'queued' | 'steering';
  message: Message;
  coalescing?: true;
  joinsPrevious?: true;
  row: RowPlace;
}

/** The row kind of a queued or steering inbox item. */
export function rowKindOf(item: RowItem): PendingRowKind {
  if (item.placement === 'steering') return 'steering';
  return item.joinsPrevious === true ? 'joined' : item.coalescing === true ? 'wakeup' : 'queued';
}

export function putRow(kind: PendingRowKind, itemId: string | null, message: Message, place: RowPlace): RowOp {
  return { op: 'put', row: { kind, position: place.position, itemId, message, acceptedAt: place.acceptedAt } };
}

export function deleteRow(message: Message): RowOp {
  return { op: 'delete', messageId: message.id };
}

/** The place of the next new row: after every other, accepted at `at`. */
export function nextPlace(bounds: RowBounds, at: string): { place: RowPlace; bounds: RowBounds } {
  const position = bounds.highest + 1;
  return { place: { position, acceptedAt: at }, bounds: { lowest: bounds.lowest, highest: position } };
}

/**
 * Move items to the front, in order, each keeping the time it was accepted: the first gets
 * `lowest - items.length`, the last `lowest - 1`. Returns the moved items and their puts (the
 * puts run from the last item to the first, as positions are handed out downwards).
 */
export function moveToFront<T extends RowItem>(bounds: RowBounds, items: readonly T[]): { items: T[]; ops: RowOp[]; bounds: RowBounds } {
  const lowest = bounds.lowest - items.length;
  const moved = items.map((item, i) => ({ ...item, row: { position: lowest + i, acceptedAt: item.row.acceptedAt } }));
  const ops = [...moved].reverse().map((item) => putRow(rowKindOf(item), item.id, item.message, item.row));
  return { items: moved, ops, bounds: { lowest, highest: bounds.highest } };
}

/** The inbox item a restored queued, wakeup, joined or steering row queues again as (a prompt). */
export function itemFromRow(row: PendingRowValue, id: string): RowItem & { placement: 'queued' } {
  const item: RowItem & { placement: 'queued' } = { id, placement: 'queued', message: row.message, row: placeOf(row) };
  if (row.kind === 'wakeup' || row.kind === 'joined') item.coalescing = true;
  if (row.kind === 'joined') item.joinsPrevious = true;
  return item;
}

export function placeOf(row: RowPlace): RowPlace {
  return { position: row.position, acceptedAt: row.acceptedAt };
}

/** The bounds once `rows` are restored: every position below `highest + 1` is taken. */
export function boundsAfter(bounds: RowBounds, rows: Iterable<RowPlace>): RowBounds {
  let { lowest, highest } = bounds;
  for (const row of rows) {
    lowest = Math.min(lowest, row.position);
    highest = Math.max(highest, row.position);
  }
  return { lowest, highest };
}
