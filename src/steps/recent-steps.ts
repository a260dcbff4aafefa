/**
 * The step ids one agent incarnation handed out, newest last and at most `RECENT_STEPS` of
 * them: a step id this incarnation never handed out is STEP_NOT_FOUND, while one it handed
 * out that is no longer open is STEP_CONFLICT (the turn machine's answer, or, for a step that
 * ended without its output or results, the reason it ended, e.g. an interrupt).
 */
import { ServiceError } from '../domain/errors.js';

const RECENT_STEPS = 64;

export class RecentSteps {
  private readonly ids: string[] = [];
  /** Why a step handed out ended early, by step id (the STEP_CONFLICT text for later requests). */
  private readonly ended = new Map<string, string>();

  remember(stepId: string): void {
    if (this.ids.includes(stepId)) return; // claimed again after its lease lapsed
    this.ids.push(stepId);
    if (this.ids.length > RECENT_STEPS) this.ended.delete(this.ids.shift()!);
  }

  /** The step ended early: later requests for it are refused with this text. */
  endEarly(stepId: string, why: string): void {
    if (this.ids.includes(stepId)) this.ended.set(stepId, why);
  }

  /**
   * Throws STEP_NOT_FOUND unless this incarnation handed out `stepId` recently, and
   * STEP_CONFLICT when it ended early.
   */
  require(stepId: string, agentId: string): void {
    if (!this.ids.includes(stepId)) {
      throw new ServiceError('STEP_NOT_FOUND', `step "${stepId}" does not exist for agent "${agentId}"`);
    }
    const why = this.ended.get(stepId);
    if (why !== undefined) throw new ServiceError('STEP_CONFLICT', why);
  }
}
