/**
 * Delivery receipts: where an acknowledged message is, from durable state.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Receipt as ReceiptView } from '../../contract/index.js';
import { errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import { MessageParams, Receipt } from './schemas.js';

export const messageRoutes: FastifyPluginAsyncTypebox<{ receipt: (messageId: string) => Promise<ReceiptView> }> = async (app, { receipt }) => {
  app.get('/v1/messages/:messageId', {
    schema: {
      tags: ['messages'],
      operationId: 'getMessageReceipt',
      summary: 'Where a message is (delivery receipt)',
      description:
        'Answers from durable state, so it holds across restarts. A message discarded with its agent (disposal) or never ' +
        'accepted is 404 MESSAGE_NOT_FOUND.',
      security: OPERATOR_SECURITY,
      params: MessageParams,
      response: { 200: Receipt, ...errorResponses(['MESSAGE_NOT_FOUND'], { bodyless: true }) },
    },
  }, async (request) => receipt(request.params.messageId));
};
