/**
 * Schemas of the budget resource: an agent's limits and the usage figures of its subtree.
 */
import { Type } from '@sinclair/typebox';
import { AgentId, BudgetView, exactInteger, ref, UsageRollup } from '../../contract/index.js';

export { BudgetView } from '../../contract/index.js';

const limit = (what: string) =>
  Type.Optional(Type.Union([exactInteger({ minimum: 0 }), Type.Null()], { description: `${what}; null removes the limit, absent leaves it as it is.` }));

export const BudgetChangeBody = Type.Object(
  {
    tokens: limit('Tokens (`totalTokens` of recorded usage) the subtree may spend'),
    steps: limit('Model requests (step claims) the subtree may make'),
    costMicroUsd: limit('Millionths of a US dollar the subtree may spend'),
  },
  { additionalProperties: false, description: 'The limits to change; the others stay as they are.' },
);

export const UsageQuery = Type.Object(
  { subtree: Type.Optional(Type.Boolean({ default: false, description: 'Also list every descendant, parents before their children.' })) },
  { additionalProperties: false },
);

export const UsageRow = Type.Object(
  {
    agentId: AgentId,
    parentId: Type.Union([Type.String(), Type.Null()]),
    usage: UsageRollup,
    budget: Type.Union([ref(BudgetView), Type.Null()]),
  },
  { additionalProperties: false },
);

export const UsageList = Type.Object(
  { items: Type.Array(UsageRow, { description: 'The agent first; with `subtree=true`, then every descendant.' }) },
  { additionalProperties: false },
);
