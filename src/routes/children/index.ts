/**
 * Child creation: a live agent (the parent, by its token) starts a child whose prompt is its
 * first queued turn.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AgentDeliveries } from '../../agents/deliveries.js';
import { agentToken } from '../auth.js';
import { IdempotencyHeaders, idempotencyOf, markReplay } from '../idempotency.js';
import { AGENT_SECURITY, AgentIdParams, errorResponses } from '../common-schemas.js';
import { ChildCreated, CreateChildBody } from './schemas.js';

export const childRoutes: FastifyPluginAsyncTypebox<{ deliveries: Pick<AgentDeliveries, 'startChild'> }> = async (app, { deliveries }) => {
  app.post('/v1/agents/:id/children', {
    schema: {
      tags: ['children'],
      operationId: 'createChild',
      summary: 'Start a child of this agent',
      description:
        'Needs the parent\'s X-Agent-Token. A continuable in-process child gets the child-scoped `report` tool (when the ' +
        'subagent-report package is installed) and settles when it has nothing left to do.',
      security: AGENT_SECURITY,
      headers: IdempotencyHeaders,
      params: AgentIdParams,
      body: CreateChildBody,
      response: {
        201: ChildCreated,
        ...errorResponses(['VALIDATION', 'UNAUTHORIZED', 'AGENT_NOT_FOUND', 'ACTIVATION_CLOSING', 'ACTIVATION_SETUP_REVOKED', 'IDEMPOTENCY_CONFLICT', 'LIMIT_EXCEEDED', 'QUOTA_EXCEEDED', 'DRAINING', 'AT_CAPACITY']),
      },
    },
  }, async (request, reply) => {
    const { mode, provider, prompt, label, instructions, toolFilter, tools, model, budget } = request.body;
    const spec = {
      mode,
      provider: provider ?? 'in-process',
      prompt,
      ...(label === undefined ? {} : { label }),
      ...(instructions === undefined ? {} : { instructions }),
      ...(toolFilter === undefined ? {} : { toolFilter }),
      ...(tools === undefined ? {} : { tools }),
      ...(model === undefined ? {} : { model }),
      ...(budget === undefined ? {} : { budget }),
    };
    const { replayed, ...created } = await deliveries.startChild(request.params.id, agentToken(request), spec, idempotencyOf(request));
    markReplay(reply, replayed);
    return reply.status(201).send(created);
  });
};
