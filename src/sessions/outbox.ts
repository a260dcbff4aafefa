/**
 * The webhook outbox as the store sees it: rows the store port carries and reads back. An
 * event that something in a forest caused (a turn ended, a child settled, a report was
 * delivered...) is queued into the session log's batch in the synchronous span that caused it,
 * and the store turns it into one delivery row per matching subscription inside the
 * transaction that commits the batch: a committed log entry always has its deliveries, and a
 * write that did not commit has none.
 *
 * A subscription matches an event by type, by forest (its `rootId`, when it names one) and by
 * tenant (its `tenantId`, when it has one, against the tenant in the header of the event's
 * root, which the store has: the root's header commits in or before the batch of its first event).
 *
 * Delivery states change through the same batches (`WebhookChange`), so they are fenced with
 * their forest like every other row: an instance that lost a forest cannot mark its deliveries.
 */

import type { DeliveryState, WebhookEventType } from '../domain/webhooks.js';

export { DELIVERY_STATES, WEBHOOK_EVENT_TYPES, type DeliveryState, type WebhookEventType } from '../domain/webhooks.js';

/** One event for the outbox; the store delivers it to every subscription that matches then. */
export interface OutboxEvent {
  /** Stable and derived from what caused it (the `webhook-id` receivers deduplicate by). */
  id: string;
  type: WebhookEventType;
  rootId: string;
  /** When it happened (ms since the epoch); the payload's `timestamp`. */
  at: number;
  /** The body every delivery sends: `{type, timestamp, data}` as JSON. */
  payload: string;
}

export interface WebhookSubscription {
  id: string;
  url: string;
  events: WebhookEventType[];
  /** Only this forest's events; null for every forest. */
  rootId: string | null;
  /**
   * The tenant whose key made it: only events of that tenant's forests (their root's header
   * says so) match it. Absent: made with an admin key, matching every forest's events.
   */
  tenantId?: string;
  /** The signing secret (`whsec_...`): stored, never listed. */
  secret: string;
  createdAt: number;
}

/** One event's delivery to one subscription. */
export interface Delivery {
  webhookId: string;
  /** The event's id: the delivery's id within its subscription and its `webhook-id`. */
  eventId: string;
  type: WebhookEventType;
  rootId: string;
  state: DeliveryState;
  attempts: number;
  createdAt: number;
  /** When the next attempt is due (pending). */
  nextAt: number;
  /** Start of the window in which it is retried (its creation, or a manual retry). */
  windowStart: number;
  lastAttemptAt: number | null;
  /** The last response's status, when there was one. */
  lastStatus: number | null;
  /** What went wrong last (never a secret or a header). */
  lastError: string | null;
  deliveredAt: number | null;
  /** Outbox order: rises with the log position of what caused it, per forest. */
  seq: number;
}

/** A delivery due now, at the head of its stream, with what sending it needs. */
export interface DueDelivery extends Delivery {
  url: string;
  secret: string;
  payload: string;
  /** Its subscription's tenant (absent: an admin's, global). */
  tenantId?: string;
}

/** A change to subscriptions or delivery states, committed in a log batch. */
export type WebhookChange =
  | { op: 'subscribe'; subscription: WebhookSubscription }
  | { op: 'unsubscribe'; webhookId: string }
  | {
      op: 'attempted';
      webhookId: string;
      eventId: string;
      rootId: string;
      state: DeliveryState;
      attempts: number;
      at: number;
      nextAt: number;
      status: number | null;
      error: string | null;
    }
  | { op: 'retry'; webhookId: string; eventId: string; rootId: string; at: number }
  /** Drop delivered rows older than `before` (the outbox's retention). */
  | { op: 'prune'; before: number };

/** The change's forest, when it has one (then it is fenced with that forest). */
export function changeRoot(change: WebhookChange): string | undefined {
  return change.op === 'attempted' || change.op === 'retry' ? change.rootId : undefined;
}

export interface DeliveryQuery {
  state?: DeliveryState | undefined;
  /** Deliveries with `seq` below this one (a page's cursor: newest first). */
  before?: number | undefined;
  limit: number;
}

/** What the outbox holds now, for metrics. */
export interface OutboxBacklog {
  pending: number;
  /** Creation time of the oldest pending delivery (ms), or null. */
  oldestPendingAt: number | null;
}

/** The store's webhook reads (writes go through WriteBatch). */
export interface WebhookReads {
  subscriptions(): Promise<WebhookSubscription[]>;
  subscription(id: string): Promise<WebhookSubscription | undefined>;
  deliveries(webhookId: string, query: DeliveryQuery): Promise<Delivery[]>;
  delivery(webhookId: string, eventId: string): Promise<Delivery | undefined>;
  /**
   * Pending deliveries due at `now` that are the oldest pending one of their stream (one
   * subscription's deliveries of one forest), oldest due first, at most `limit`. With forest
   * leases (`instanceId` given), forests another instance holds are left out.
   */
  due(now: number, limit: number, instanceId?: string): Promise<DueDelivery[]>;
  /**
   * The oldest pending delivery of one stream after outbox position `afterSeq`, when it is due
   * at `now` (an index seek, not a scan).
   */
  head(webhookId: string, rootId: string, afterSeq: number, now: number): Promise<DueDelivery | undefined>;
  backlog(): Promise<OutboxBacklog>;
}

/** The key of a delivery stream: one subscription's deliveries of one forest, sent in order. */
export function streamKey(webhookId: string, rootId: string): string {
  return `${webhookId} ${rootId}`;
}

/** ',a,b,' — how the SQL stores keep a subscription's event types, matched with `,type,`. */
export function eventsColumn(events: readonly WebhookEventType[]): string {
  return `,${events.join(',')},`;
}

export function eventsOfColumn(column: string): WebhookEventType[] {
  return column.split(',').filter((e) => e !== '') as WebhookEventType[];
}
