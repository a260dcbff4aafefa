/**
 * The webhook vocabulary: the event types a subscription may name and the states of one
 * event's delivery to one subscription.
 */

export const WEBHOOK_EVENT_TYPES = [
  'turn.ended',
  'agent.settled',
  'agent.closed',
  'report.delivered',
  'agent.paused',
  'step.lease_expired',
  'tool.call_requested',
  'approval.requested',
  'approval.decided',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** pending: to be sent (again); delivered: a 2xx answered; failed: given up (retry by hand). */
export const DELIVERY_STATES = ['pending', 'delivered', 'failed'] as const;
export type DeliveryState = (typeof DELIVERY_STATES)[number];
