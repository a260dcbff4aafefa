/**
 * Webhook subscriptions and their deliveries, as the API shows them.
 */
import { Type } from '@sinclair/typebox';
import { DELIVERY_STATES, WEBHOOK_EVENT_TYPES } from '../domain/webhooks.js';
import { AgentId } from './common.js';
import { literals } from './schema.js';

export const WebhookEventType = literals(WEBHOOK_EVENT_TYPES, { description: 'An event type a subscription may name.' });
export const DeliveryState = literals(DELIVERY_STATES, {
  description: '`pending`: to be sent (again); `delivered`: the receiver answered 2xx; `failed`: given up (retry it by hand).',
});

export const WebhookId = Type.String({ minLength: 1, maxLength: 128, description: 'A webhook subscription id.' });
export const DeliveryId = Type.String({ minLength: 1, maxLength: 128, description: "A delivery's id within its subscription: the event's id, sent as `webhook-id`." });

export const NewWebhook = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: 2048, description: 'Where deliveries are POSTed: http or https; private, loopback and link-local addresses are refused unless the deployment allows them.' }),
    events: Type.Array(WebhookEventType, { minItems: 1, maxItems: WEBHOOK_EVENT_TYPES.length, uniqueItems: true, description: 'The event types to deliver.' }),
    rootId: Type.Optional(AgentId),
    secret: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'The signing secret, `whsec_` and base64 of 16 to 64 bytes; generated when absent.' })),
  },
  { additionalProperties: false },
);

const subscriptionFields = {
  id: WebhookId,
  url: Type.String(),
  events: Type.Array(WebhookEventType),
  rootId: Type.Union([AgentId, Type.Null()], { description: "Only this forest's events; null for every forest." }),
  tenantId: Type.Optional(
    Type.String({ description: "The tenant whose key made it: only that tenant's forests' events are sent to it. Absent: made with an admin key, every forest's." }),
  ),
};

export const CreatedWebhook = Type.Object(
  { ...subscriptionFields, secret: Type.String({ description: 'The signing secret: shown only in this answer.' }) },
  { additionalProperties: false },
);

export const WebhookView = Type.Object(
  { ...subscriptionFields, createdAt: Type.String({ description: 'When the subscription was created (ISO 8601).' }) },
  { additionalProperties: false },
);

export const WebhookList = Type.Object({ items: Type.Array(WebhookView) }, { additionalProperties: false });

const time = (description: string) => Type.Union([Type.String(), Type.Null()], { description });

export const DeliveryView = Type.Object(
  {
    id: DeliveryId,
    webhookId: WebhookId,
    type: WebhookEventType,
    rootId: AgentId,
    state: DeliveryState,
    attempts: Type.Integer({ minimum: 0 }),
    createdAt: Type.String({ description: 'When the event was queued (ISO 8601).' }),
    nextAttemptAt: time('When a pending delivery is next sent; null otherwise.'),
    lastAttemptAt: time('When it was last sent.'),
    lastStatus: Type.Union([Type.Integer(), Type.Null()], { description: "The last answer's HTTP status (null when none came)." }),
    lastError: Type.Union([Type.String(), Type.Null()], { description: 'What went wrong last.' }),
    deliveredAt: time('When a 2xx answered it.'),
  },
  { additionalProperties: false },
);

export const DeliveryList = Type.Object(
  {
    items: Type.Array(DeliveryView, { description: 'Newest first.' }),
    nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'Pass as `cursor` for the next (older) page; null at the end.' }),
  },
  { additionalProperties: false },
);

export const DeliveryQuery = Type.Object(
  {
    state: Type.Optional(DeliveryState),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: 100 })),
    cursor: Type.Optional(Type.String({ pattern: '^[0-9]{1,15}$', description: 'From `nextCursor` of the page before.' })),
  },
  { additionalProperties: false },
);
