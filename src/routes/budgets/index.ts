/**
 * Budget routes: an agent's limits (read and changed by the operator) and the usage figures of
 * it and its subtree. Thin: parse, call the service, shape.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { BudgetChanges } from '../../budgets/budget-changes.js';
import type { Budgets } from '../../budgets/budgets.js';
import { AgentIdParams, errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import { BudgetChangeBody, BudgetView, UsageList, UsageQuery } from './schemas.js';

export interface BudgetRoutesOptions {
  budgets: Budgets;
  changes: BudgetChanges;
}

export const budgetRoutes: FastifyPluginAsyncTypebox<BudgetRoutesOptions> = async (app, { budgets, changes }) => {
  app.put('/v1/agents/:id/budget', {
    schema: {
      tags: ['budgets'],
      operationId: 'putBudget',
      summary: "Change an agent's budget",
      description:
        "The body names the limits to change (`null` removes one); the others stay. The limits bound what the agent's whole subtree spends. " +
        "A child's raised limits are a grant: more than the budgets above it have left is refused (400 VALIDATION). " +
        'Steps the old limits had paused are handed out again at once; claimable agents below that the new ones stop are paused. ' +
        'Answers the limits and what remains of each; durable (a budget entry in the session).',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      body: BudgetChangeBody,
      response: { 200: BudgetView, ...errorResponses(['VALIDATION', 'AGENT_NOT_FOUND', 'NOT_RESUMABLE', 'ACTIVATION_CLOSING', 'AGENT_EXISTS']) },
    },
  }, async (request) => changes.change(request.params.id, request.body));

  app.get('/v1/agents/:id/budget', {
    schema: {
      tags: ['budgets'],
      operationId: 'getBudget',
      summary: "An agent's budget",
      description: 'Its own limits and what remains of each (`{remaining: {}}` when it has none of its own; a budget above it may still stop it).',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      response: { 200: BudgetView, ...errorResponses(['AGENT_NOT_FOUND']) },
    },
  }, async (request) => {
    const [row] = await budgets.usage(request.params.id, false);
    return row?.budget ?? { remaining: {} };
  });

  app.get('/v1/agents/:id/usage', {
    schema: {
      tags: ['budgets'],
      operationId: 'getUsage',
      summary: 'What an agent and its subtree spent',
      description:
        "Each row: the agent's own usage (`self`) and its subtree's (`subtree`: it and every descendant), and its budget. " +
        'Steps are counted when claimed; tokens and cost when the output (or compaction) that carries the usage is recorded.',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      querystring: UsageQuery,
      response: { 200: UsageList, ...errorResponses(['AGENT_NOT_FOUND']) },
    },
  }, async (request) => ({ items: await budgets.usage(request.params.id, request.query.subtree === true) }));
};
