/**
 * Approval rules and approvals as the API shows them (src/domain/approvals.ts).
 */
import { Type, type Static } from '@sinclair/typebox';
import { APPROVAL_STATES, DECISIONS, REMEMBER, RULE_DECISIONS, RULE_TOOL_PATTERN } from '../domain/approvals.js';
import { AgentId } from './common.js';
import { literals, shared } from './schema.js';

export const ApprovalRuleBody = shared(
  'ApprovalRuleBody',
  Type.Object(
    {
      tool: Type.String({ pattern: RULE_TOOL_PATTERN, description: 'A tool name, or a prefix ending in `*` (`mcp__files__write_*`).' }),
      rootId: Type.Optional(AgentId),
      decision: literals(RULE_DECISIONS, { description: '`ask`: a person decides each call; `allow`: calls run; `deny`: calls get an error result.' }),
    },
    { additionalProperties: false },
  ),
);
export type ApprovalRuleBody = Static<typeof ApprovalRuleBody>;

export const ApprovalRuleView = shared(
  'ApprovalRuleView',
  Type.Object(
    {
      id: Type.String(),
      tool: Type.String(),
      rootId: Type.Optional(AgentId),
      decision: literals(RULE_DECISIONS),
      updatedAt: Type.String({ format: 'date-time' }),
      tenantId: Type.Optional(
        Type.String({ description: "The tenant whose key made it (or whose agent's approval remembered it): it applies to that tenant's agents only. Absent: an admin's, for every agent." }),
      ),
    },
    { additionalProperties: false, description: 'A rule: the most specific one matching a call decides (a forest\'s over a global one, an exact name over a wildcard, a longer prefix over a shorter).' },
  ),
);
export type ApprovalRuleView = Static<typeof ApprovalRuleView>;

export const Approval = shared(
  'Approval',
  Type.Object(
    {
      id: Type.String({ description: '`apr_` and 26 characters, the same whenever the call asks again.' }),
      state: literals(APPROVAL_STATES),
      rootId: AgentId,
      agentId: AgentId,
      path: Type.Array(AgentId, { description: 'The agents from the root down to the one that asked.' }),
      stepId: Type.String(),
      toolCallId: Type.String(),
      tool: Type.String(),
      input: Type.Unknown(),
      effectKey: Type.String({ description: 'The call\'s effect key: an approved call runs with it.' }),
      requestedAt: Type.String({ format: 'date-time' }),
      expiresAt: Type.String({ format: 'date-time' }),
      decidedAt: Type.Optional(Type.String({ format: 'date-time', description: 'When it was approved, denied, expired or cancelled.' })),
      reason: Type.Optional(Type.String()),
      remember: Type.Optional(literals(['forest', 'always'] as const, { description: 'The rule the decision added.' })),
    },
    { additionalProperties: false, description: 'A tool call waiting for (or given) a person\'s decision.' },
  ),
);
export type Approval = Static<typeof Approval>;

export const DecisionBody = Type.Object(
  {
    decision: literals(DECISIONS),
    reason: Type.Optional(Type.String({ maxLength: 2000, description: 'Shown to the model after a denial.' })),
    remember: Type.Optional(
      literals(REMEMBER, {
        description:
          "`forest`: add a rule for this tool in this forest; `always`: one for every forest (of the agent's tenant only, for a tenant's agent: the rule is that tenant's); `once` (default): none.",
      }),
    ),
  },
  { additionalProperties: false },
);
export type DecisionBody = Static<typeof DecisionBody>;

export const APPROVAL_SCHEMAS = [ApprovalRuleBody, ApprovalRuleView, Approval] as const;
