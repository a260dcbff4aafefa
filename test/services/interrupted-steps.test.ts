/**
 * InterruptedSteps (src/steps/interrupted-steps.ts): a step remembered as interrupted
 * is refused with STEP_CONFLICT for the token that held it and no other, and the memory keeps
 * the most recent 4096 steps.
 */
import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/domain/errors.js';
import { InterruptedSteps } from '../../src/steps/interrupted-steps.js';
import { mintToken } from '../../src/agents/tokens.js';

function refusal(steps: InterruptedSteps, agentId: string, stepId: string, token: string | undefined): ServiceError | undefined {
  try {
    steps.refuse(agentId, stepId, token);
    return undefined;
  } catch (error) {
    if (error instanceof ServiceError) return error;
    throw error;
  }
}

describe('InterruptedSteps', () => {
  it("refuses the holder's token for that agent's step only", () => {
    const steps = new InterruptedSteps();
    const token = mintToken();
    steps.remember('a', 's1', token);
    expect(refusal(steps, 'a', 's1', token)).toMatchObject({ code: 'STEP_CONFLICT', message: 'step "s1" was cancelled: its turn was interrupted' });
    expect(refusal(steps, 'a', 's1', mintToken())).toBeUndefined();
    expect(refusal(steps, 'a', 's1', undefined)).toBeUndefined();
    expect(refusal(steps, 'a', 's2', token)).toBeUndefined();
    expect(refusal(steps, 'b', 's1', token)).toBeUndefined();
  });

  it('forgets the oldest step past 4096, and a step remembered again counts as new', () => {
    const steps = new InterruptedSteps();
    const token = mintToken();
    for (let i = 0; i < 4096; i++) steps.remember('a', `s${i}`, token);
    steps.remember('a', 's0', token);
    steps.remember('a', 'one more', token);
    expect(refusal(steps, 'a', 's1', token)).toBeUndefined();
    expect(refusal(steps, 'a', 's0', token)?.code).toBe('STEP_CONFLICT');
    expect(refusal(steps, 'a', 's2', token)?.code).toBe('STEP_CONFLICT');
    expect(refusal(steps, 'a', 'one more', token)?.code).toBe('STEP_CONFLICT');
  });
});
