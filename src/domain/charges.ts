/**
 * What a logged entry charges to the budgets above its agent (see budget.ts): a step-start one
 * step, a model answer or a compaction the tokens and cost of its usage, anything else nothing.
 * The ledger and the metrics both count from this one rule.
 */
import { zeroUsage, type Usage } from './budget.js';
import type { TokenUsage } from './model.js';
import type { EntryBody } from './session.js';

export function chargeOf(entry: EntryBody): Usage | undefined {
  if (entry.type === 'step-start') return { ...zeroUsage(), steps: 1 };
  if ((entry.type === 'message' || entry.type === 'compaction') && entry.usage !== undefined) return tokenCharge(entry.usage);
  return undefined;
}

function tokenCharge(usage: TokenUsage): Usage {
  return {
    steps: 0,
    promptTokens: usage.promptTokens,
    completionTokens: usage.completionTokens,
    totalTokens: usage.totalTokens,
    costMicroUsd: usage.costMicroUsd ?? 0,
  };
}
