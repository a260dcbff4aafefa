/**
 * Steps whose turn was interrupted, remembered past the incarnation that held them. A backend
 * that posts an output, tool results or a heartbeat for such a step is told the turn was
 * interrupted (409 STEP_CONFLICT), whatever happened to the agent since: while the incarnation
 * is live its own record of the step answers (agent-steps.ts); once it is gone (a child that
 * settled or was closed, a root disposed or resumed) this one does, where the token alone would
 * only be stale (403).
 *
 * Invariants: only the token of the incarnation that held the step is told (anyone else gets
 * the answer the token deserves); tokens are kept as digests, never as themselves, and compared
 * in constant time; at most MAX_REMEMBERED steps, the oldest forgotten first, in this process.
 */
import { ServiceError } from '../domain/errors.js';
import { digest, matchesAny } from '../agents/tokens.js';

const MAX_REMEMBERED = 4096;

/** The STEP_CONFLICT text for any later request about a step whose turn was interrupted. */
export function interruptedStepText(stepId: string): string {
  return `step "${stepId}" was cancelled: its turn was interrupted`;
}

export class InterruptedSteps {
  /** The digest of the holder's token, by agent id and step id. */
  private readonly steps = new Map<string, Buffer>();

  /** The turn holding `stepId` of agent `agentId` was interrupted while `token`'s incarnation held it. */
  remember(agentId: string, stepId: string, token: string): void {
    const key = keyOf(agentId, stepId);
    this.steps.delete(key);
    this.steps.set(key, digest(token));
    if (this.steps.size > MAX_REMEMBERED) this.steps.delete(this.steps.keys().next().value!);
  }

  /** Throws STEP_CONFLICT when `token` held `stepId` of `agentId` when its turn was interrupted. */
  refuse(agentId: string, stepId: string, token: string | undefined): void {
    const held = this.steps.get(keyOf(agentId, stepId));
    if (held !== undefined && matchesAny(token, [held])) throw new ServiceError('STEP_CONFLICT', interruptedStepText(stepId));
  }
}

function keyOf(agentId: string, stepId: string): string {
  return `${agentId}\n${stepId}`;
}
