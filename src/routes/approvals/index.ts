/**
 * Approval rules and the approvals inbox (operator). Thin: parse, call the rules or the
 * approvals, shape. A decision for an agent another instance runs is forwarded there
 * (plugins/forwarding.ts); the inbox is read from the store, so any instance answers it.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { Approval, ApprovalRuleBody, ApprovalRuleView, DecisionBody, literals, ref } from '../../contract/index.js';
import { APPROVAL_STATES, RULE_ID_PATTERN } from '../../domain/approvals.js';
import type { ApprovalRules } from '../../approvals/approval-rules.js';
import type { Approvals } from '../../approvals/approvals.js';
import { tenantOf } from '../auth.js';
import { errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';

const RuleParams = Type.Object({ id: Type.String({ pattern: RULE_ID_PATTERN, description: 'Letters, digits, `_`, `.`, `:` and `-`, at most 128.' }) });
const ApprovalParams = Type.Object({ approvalId: Type.String({ minLength: 1, maxLength: 200 }) });
const RuleList = Type.Object({ items: Type.Array(ref(ApprovalRuleView)) }, { additionalProperties: false });
const ApprovalQuery = Type.Object(
  {
    state: Type.Optional(literals(APPROVAL_STATES, { description: 'Only approvals in this state now (a pending one past its `expiresAt` is `expired`).' })),
    rootId: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Only this forest\'s.' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 1000 })),
  },
  { additionalProperties: false },
);
const ApprovalPage = Type.Object(
  { items: Type.Array(ref(Approval)), nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'Pass as `cursor` for the next page; null on the last.' }) },
  { additionalProperties: false },
);

export interface ApprovalRoutesOptions {
  rules: ApprovalRules;
  approvals: Pick<Approvals, 'page' | 'get' | 'decide'>;
}

export const approvalRoutes: FastifyPluginAsyncTypebox<ApprovalRoutesOptions> = async (app, { rules, approvals }) => {
  app.put('/v1/approval-rules/:id', {
    schema: {
      tags: ['approvals'],
      operationId: 'putApprovalRule',
      summary: 'Add or replace an approval rule',
      description:
        'Which calls run, are refused, or wait for a person. The most specific matching rule decides: a forest\'s (`rootId`) over a global one, an exact tool name over a wildcard, ' +
        'a longer prefix over a shorter; among equals, the most cautious (deny, ask, allow). No rule: allow. Rules apply to every tool the service knows (service-owned, MCP, declared backend tools). Durable before answered. ' +
        "With a tenant key the rule is the tenant's: it applies to its agents only (an admin's rules apply to every agent). Another tenant's id is 404 as an unknown one; " +
        "a global rule is 403. An admin replacing a tenant's rule keeps it the tenant's.",
      security: OPERATOR_SECURITY,
      params: RuleParams,
      body: ref(ApprovalRuleBody),
      response: { 200: ref(ApprovalRuleView), ...errorResponses(['VALIDATION', 'UNAUTHORIZED', 'APPROVAL_RULE_NOT_FOUND']) },
    },
  }, async (request) => rules.put(request.params.id, request.body, tenantOf(request)));

  app.get('/v1/approval-rules', {
    schema: {
      tags: ['approvals'],
      operationId: 'listApprovalRules',
      summary: 'The approval rules',
      description: 'By id. A tenant key sees its own rules and the global ones.',
      security: OPERATOR_SECURITY,
      response: { 200: RuleList, ...errorResponses([]) },
    },
  }, async (request) => ({ items: rules.list(tenantOf(request)) }));

  app.delete('/v1/approval-rules/:id', {
    schema: {
      tags: ['approvals'],
      operationId: 'deleteApprovalRule',
      summary: 'Remove an approval rule',
      description: 'Calls decided from now on no longer see it. Durable before answered. A tenant key removes its own rules only (a global one: 403).',
      security: OPERATOR_SECURITY,
      params: RuleParams,
      response: { 204: Type.Null({ description: 'Removed.' }), ...errorResponses(['UNAUTHORIZED', 'APPROVAL_RULE_NOT_FOUND']) },
    },
  }, async (request, reply) => {
    await rules.delete(request.params.id, tenantOf(request));
    return reply.code(204).send(null);
  });

  app.get('/v1/approvals', {
    schema: {
      tags: ['approvals'],
      operationId: 'listApprovals',
      summary: 'The inbox: approvals of every forest, oldest first',
      description: "A tenant key sees the approvals of its own tenant's agents only.",
      security: OPERATOR_SECURITY,
      querystring: ApprovalQuery,
      response: { 200: ApprovalPage, ...errorResponses(['VALIDATION']) },
    },
  }, async (request) => {
    const { state, rootId, limit = 100, cursor } = request.query;
    return approvals.page({ state, rootId, tenantId: tenantOf(request), limit, cursor });
  });

  app.get('/v1/approvals/:approvalId', {
    schema: {
      tags: ['approvals'],
      operationId: 'getApproval',
      summary: 'One approval',
      security: OPERATOR_SECURITY,
      params: ApprovalParams,
      response: { 200: ref(Approval), ...errorResponses(['APPROVAL_NOT_FOUND']) },
    },
  }, async (request) => approvals.get(request.params.approvalId));

  app.post('/v1/approvals/:approvalId/decision', {
    schema: {
      tags: ['approvals'],
      operationId: 'decideApproval',
      summary: 'Approve or deny a call waiting for a person',
      description:
        '`approve` executes the call as it would have run, with its effect key; `deny` records `Error: a person denied the call to <tool>` (`: <reason>` when given). ' +
        "`remember: forest` adds a rule allowing (or denying) the tool in this forest, `always` one for every forest (a tenant's agent: the tenant's rule, for its forests). " +
        'The same decision again answers the approval as it is; ' +
        'another after a decision, an expiry or a cancellation is 409 APPROVAL_DECIDED. Durable before answered.',
      security: OPERATOR_SECURITY,
      params: ApprovalParams,
      body: DecisionBody,
      response: { 200: ref(Approval), ...errorResponses(['APPROVAL_NOT_FOUND', 'APPROVAL_DECIDED']) },
    },
  }, async (request) => approvals.decide(request.params.approvalId, request.body));
};
