/**
 * The step ids one agent incarnation handed out, newest last and at most `RECENT_STEPS` of
 * them: a step id this incarnation never handed out is STEP_NOT_FOUND, while one it handed
 * out that is no longer open is STEP_CONFLICT (the turn machine's answer).
 */
import { ServiceError } from '../domain/errors.js';

const RECENT_STEPS = 64;

export class RecentSteps {
  private readonly ids: string[] = [];

  remember(stepId: string): void {
    this.ids.push(stepId);
    if (this.ids.length > RECENT_STEPS) this.ids.shift();
  }

  /** Throws STEP_NOT_FOUND unless this incarnation handed out `stepId` recently. */
  require(stepId: string, agentId: string): void {
    if (!this.ids.includes(stepId)) {
      throw new ServiceError('STEP_NOT_FOUND', `step "${stepId}" does not exist for agent "${agentId}"`);
    }
  }
}
