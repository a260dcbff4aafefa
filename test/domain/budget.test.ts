/**
 * The budget rules (domain/budget.ts) and pricing (domain/pricing.ts): what an entry charges,
 * when a budget is exhausted, what remains, how a change applies, how usage is priced.
 */
import { describe, expect, it } from 'vitest';
import { changeBudget, exhaustedKind, remainingOf, zeroUsage, type Usage } from '../../src/domain/budget.js';
import { chargeOf } from '../../src/domain/charges.js';
import { priceUsage } from '../../src/domain/pricing.js';

const AT = '2026-12-02T00:00:00.000Z';

function used(partial: Partial<Usage>): Usage {
  return { ...zeroUsage(), ...partial };
}

describe('budget rules', () => {
  it('charges a step-start one step and an entry with usage its tokens and cost, nothing else', () => {
    expect(chargeOf({ type: 'step-start', at: AT, turnId: 't', stepId: 's', index: 0 })).toEqual(used({ steps: 1 }));
    const usage = { promptTokens: 3, completionTokens: 4, totalTokens: 7, costMicroUsd: 9 };
    expect(chargeOf({ type: 'message', at: AT, messageId: 'm', role: 'assistant', content: [], source: { kind: 'model' }, usage })).toEqual(used({ promptTokens: 3, completionTokens: 4, totalTokens: 7, costMicroUsd: 9 }));
    expect(chargeOf({ type: 'compaction', at: AT, summary: 's', throughSeq: 1, usage: { promptTokens: 1, completionTokens: 1, totalTokens: 2 } })).toEqual(used({ promptTokens: 1, completionTokens: 1, totalTokens: 2 }));
    expect(chargeOf({ type: 'message', at: AT, messageId: 'm', role: 'user', content: [], source: { kind: 'user' } })).toBeUndefined();
    expect(chargeOf({ type: 'turn-end', at: AT, turnId: 't', reason: 'completed' })).toBeUndefined();
    expect(chargeOf({ type: 'budget', at: AT, budget: { steps: 1 } })).toBeUndefined();
  });

  it('is exhausted once the subtree spent at least a limit, in the order tokens, steps, cost', () => {
    expect(exhaustedKind(undefined, used({ steps: 100 }))).toBeUndefined();
    expect(exhaustedKind({ steps: 3 }, used({ steps: 2 }))).toBeUndefined();
    expect(exhaustedKind({ steps: 3 }, used({ steps: 3 }))).toBe('steps');
    expect(exhaustedKind({ tokens: 10, steps: 3 }, used({ steps: 3, totalTokens: 10 }))).toBe('tokens');
    expect(exhaustedKind({ costMicroUsd: 5 }, used({ costMicroUsd: 4.5 }))).toBeUndefined();
    expect(exhaustedKind({ costMicroUsd: 5 }, used({ costMicroUsd: 6 }))).toBe('costMicroUsd');
    expect(exhaustedKind({ tokens: 0 }, used({}))).toBe('tokens');
  });

  it('shows what remains of each limit, never below zero', () => {
    expect(remainingOf({ tokens: 10, steps: 3 }, used({ totalTokens: 25, steps: 1 }))).toEqual({ tokens: 0, steps: 2 });
  });

  it('changes the limits named, removes those set to null and keeps the rest', () => {
    const before = { tokens: 10, steps: 3 };
    expect(changeBudget(before, { tokens: 20, steps: null, costMicroUsd: 7 })).toEqual({ tokens: 20, costMicroUsd: 7 });
    expect(before).toEqual({ tokens: 10, steps: 3 });
    expect(changeBudget(undefined, {})).toEqual({});
  });
});

describe('pricing', () => {
  const prices = new Map([
    ['m', { prompt: 0.15, completion: 0.6 }],
    ['*', { prompt: 1, completion: 2 }],
  ]);

  it('prices the prompt and completion tokens, rounded up to a whole micro-dollar but not for float error', () => {
    expect(priceUsage({ promptTokens: 100, completionTokens: 0, totalTokens: 100 }, 'm', prices).costMicroUsd).toBe(15);
    expect(priceUsage({ promptTokens: 1, completionTokens: 1, totalTokens: 2 }, 'm', prices).costMicroUsd).toBe(1);
    expect(priceUsage({ promptTokens: 10, completionTokens: 5, totalTokens: 15 }, 'other', prices).costMicroUsd).toBe(20);
    expect(priceUsage({ promptTokens: 10, completionTokens: 5, totalTokens: 15 }, undefined, prices).costMicroUsd).toBe(20);
  });

  it('keeps a posted cost, and leaves usage unpriced without a price for the model', () => {
    expect(priceUsage({ promptTokens: 10, completionTokens: 5, totalTokens: 15, costMicroUsd: 3 }, 'm', prices).costMicroUsd).toBe(3);
    expect(priceUsage({ promptTokens: 10, completionTokens: 5, totalTokens: 15 }, 'x', new Map([['m', { prompt: 1, completion: 1 }]])).costMicroUsd).toBeUndefined();
  });
});
