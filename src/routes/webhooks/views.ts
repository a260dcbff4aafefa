/**
 * Webhook subscriptions and deliveries as the API shows them: times as ISO 8601.
 */
import type { Static } from '@sinclair/typebox';
import type { DeliveryView, WebhookView } from '../../contract/index.js';
import type { Delivery } from '../../sessions/outbox.js';
import type { SubscriptionView } from '../../observation/webhooks/subscriptions.js';

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

export function webhookView(sub: SubscriptionView): Static<typeof WebhookView> {
  return {
    id: sub.id,
    url: sub.url,
    events: sub.events,
    rootId: sub.rootId,
    ...(sub.tenantId === undefined ? {} : { tenantId: sub.tenantId }),
    createdAt: new Date(sub.createdAt).toISOString(),
  };
}

export function deliveryView(d: Delivery): Static<typeof DeliveryView> {
  return {
    id: d.eventId,
    webhookId: d.webhookId,
    type: d.type,
    rootId: d.rootId,
    state: d.state,
    attempts: d.attempts,
    createdAt: new Date(d.createdAt).toISOString(),
    nextAttemptAt: d.state === 'pending' ? iso(d.nextAt) : null,
    lastAttemptAt: iso(d.lastAttemptAt),
    lastStatus: d.lastStatus,
    lastError: d.lastError,
    deliveredAt: iso(d.deliveredAt),
  };
}
