/**
 * Webhook routes (operator): subscriptions, and each one's deliveries with their retry. Thin:
 * parse, call the subscriptions service with the caller's principal, shape. A route naming a
 * subscription is kept to its tenant by the tenant-access hook (routes/tenant-access.ts).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { CreatedWebhook, DeliveryId, DeliveryList, DeliveryQuery, DeliveryView, NewWebhook, WebhookId, WebhookList, WebhookView } from '../../contract/index.js';
import type { WebhookSubscriptions } from '../../observation/webhooks/subscriptions.js';
import { errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import { deliveryView, webhookView } from './views.js';

const WebhookParams = Type.Object({ id: WebhookId });
const DeliveryParams = Type.Object({ id: WebhookId, deliveryId: DeliveryId });

export const webhookRoutes: FastifyPluginAsyncTypebox<{ subscriptions: WebhookSubscriptions }> = async (app, { subscriptions }) => {
  app.post('/v1/webhooks', {
    schema: {
      tags: ['webhooks'],
      operationId: 'createWebhook',
      summary: 'Subscribe a URL to events',
      description:
        'Events of the named types (of every forest, or of `rootId`) are POSTed to `url`, signed with the secret as Standard Webhooks prescribes ' +
        '(`webhook-id`, `webhook-timestamp`, `webhook-signature`). Answered once durable; the secret is shown only here. ' +
        'Only events that happen after the subscription are delivered. ' +
        "Made with a tenant key, it is the tenant's (`tenantId`): only its own forests' events are sent to it, `rootId` included " +
        "(another tenant's root is accepted as an unknown one is, and matches nothing). Made with an admin key, it is global.",
      security: OPERATOR_SECURITY,
      body: NewWebhook,
      response: { 201: CreatedWebhook, ...errorResponses([]) },
    },
  }, async (request, reply) => {
    const { id, url, events, rootId, tenantId, secret } = await subscriptions.create(request.principal, request.body);
    return reply.code(201).send({ id, url, events, rootId, ...(tenantId === undefined ? {} : { tenantId }), secret });
  });

  app.get('/v1/webhooks', {
    schema: {
      tags: ['webhooks'],
      operationId: 'listWebhooks',
      summary: 'The webhook subscriptions',
      description: "Oldest first; secrets are never listed. A tenant key lists its tenant's own subscriptions; an admin key every one.",
      security: OPERATOR_SECURITY,
      response: { 200: WebhookList, ...errorResponses([]) },
    },
  }, async (request) => ({ items: (await subscriptions.list(request.principal)).map(webhookView) }));

  app.get('/v1/webhooks/:id', {
    schema: {
      tags: ['webhooks'],
      operationId: 'getWebhook',
      summary: 'One webhook subscription',
      security: OPERATOR_SECURITY,
      params: WebhookParams,
      response: { 200: WebhookView, ...errorResponses(['WEBHOOK_NOT_FOUND']) },
    },
  }, async (request) => webhookView(await subscriptions.get(request.params.id)));

  app.delete('/v1/webhooks/:id', {
    schema: {
      tags: ['webhooks'],
      operationId: 'deleteWebhook',
      summary: 'Delete a webhook subscription',
      description: 'Nothing more is sent to it, and its deliveries (pending ones included) are dropped.',
      security: OPERATOR_SECURITY,
      params: WebhookParams,
      response: { 204: Type.Null({ description: 'Deleted.' }), ...errorResponses(['WEBHOOK_NOT_FOUND']) },
    },
  }, async (request, reply) => {
    await subscriptions.remove(request.params.id);
    return reply.code(204).send(null);
  });

  app.get('/v1/webhooks/:id/deliveries', {
    schema: {
      tags: ['webhooks'],
      operationId: 'listWebhookDeliveries',
      summary: "A subscription's deliveries",
      description: 'Newest first, optionally of one state; `failed` ones were given up and can be retried. Delivered ones are kept for a week.',
      security: OPERATOR_SECURITY,
      params: WebhookParams,
      querystring: DeliveryQuery,
      response: { 200: DeliveryList, ...errorResponses(['WEBHOOK_NOT_FOUND']) },
    },
  }, async (request) => {
    const limit = request.query.limit ?? 100;
    const before = request.query.cursor === undefined ? undefined : Number(request.query.cursor);
    const page = await subscriptions.deliveries(request.params.id, { state: request.query.state, before, limit });
    const last = page[page.length - 1];
    return { items: page.map(deliveryView), nextCursor: page.length === limit && last !== undefined ? String(last.seq) : null };
  });

  app.post('/v1/webhooks/:id/deliveries/:deliveryId/retry', {
    schema: {
      tags: ['webhooks'],
      operationId: 'retryWebhookDelivery',
      summary: 'Send a delivery again',
      description:
        'Makes the delivery pending and due now, whatever its state (a failed one, or a delivered one to send again), with a new retry window. ' +
        'It goes out when it is the oldest pending delivery of its forest to this subscription.',
      security: OPERATOR_SECURITY,
      params: DeliveryParams,
      response: { 202: DeliveryView, ...errorResponses(['WEBHOOK_NOT_FOUND', 'DELIVERY_NOT_FOUND']) },
    },
  }, async (request, reply) => reply.code(202).send(deliveryView(await subscriptions.retry(request.params.id, request.params.deliveryId))));
};
