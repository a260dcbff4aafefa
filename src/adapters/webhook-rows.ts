/**
 * Webhook rows as both SQL stores read them back (SQLite's numbers, PostgreSQL's BIGINT text),
 * turned into the outbox's types.
 */
import { eventsOfColumn, type Delivery, type DeliveryState, type DueDelivery, type WebhookEventType, type WebhookSubscription } from '../sessions/outbox.js';

export interface SubscriptionRow {
  id: string;
  url: string;
  events: string;
  root_id: string | null;
  tenant_id: string | null;
  secret: string;
  created_at: number;
}

export interface DeliveryRow {
  seq: number;
  webhook_id: string;
  event_id: string;
  root_id: string;
  type: string;
  state: string;
  attempts: number;
  created_at: number;
  next_at: number;
  window_start: number;
  last_attempt_at: number | null;
  last_status: number | null;
  last_error: string | null;
  delivered_at: number | null;
}

export function subscriptionOf(row: SubscriptionRow): WebhookSubscription {
  return {
    id: row.id,
    url: row.url,
    events: eventsOfColumn(row.events),
    rootId: row.root_id,
    ...(row.tenant_id === null ? {} : { tenantId: row.tenant_id }),
    secret: row.secret,
    createdAt: Number(row.created_at),
  };
}

export function deliveryOf(row: DeliveryRow): Delivery {
  return {
    webhookId: row.webhook_id,
    eventId: row.event_id,
    type: row.type as WebhookEventType,
    rootId: row.root_id,
    state: row.state as DeliveryState,
    attempts: Number(row.attempts),
    createdAt: Number(row.created_at),
    nextAt: Number(row.next_at),
    windowStart: Number(row.window_start),
    lastAttemptAt: row.last_attempt_at === null ? null : Number(row.last_attempt_at),
    lastStatus: row.last_status === null ? null : Number(row.last_status),
    lastError: row.last_error,
    deliveredAt: row.delivered_at === null ? null : Number(row.delivered_at),
    seq: Number(row.seq),
  };
}

/** A delivery due, with what sending it needs of its subscription. */
export type DueRow = DeliveryRow & { payload: string; url: string; secret: string; tenant_id: string | null };

export function dueOf(row: DueRow): DueDelivery {
  return { ...deliveryOf(row), payload: row.payload, url: row.url, secret: row.secret, ...(row.tenant_id === null ? {} : { tenantId: row.tenant_id }) };
}
