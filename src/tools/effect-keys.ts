/**
 * Effect keys: every recorded tool call has one, derived from where it was recorded (the
 * agent's session, the step or context message that holds it, the call's id), so it is the
 * same wherever the call travels and whenever it runs again — after a lost answer, a worker's
 * death or a restart — without being stored anywhere first. A server that honours it (MCP
 * `_meta`, `Idempotency-Key`) runs the call once: at least once with a stable key, exactly
 * once where the tool honours the key.
 */
import { createHash } from 'node:crypto';

/** The effect key of call `callId` recorded in `scope` (a step id, or the id of the message that holds it) of `sessionId`. */
export function effectKeyOf(sessionId: string, scope: string, callId: string): string {
  return `ek_${createHash('sha256').update(`${sessionId}\u0000${scope}\u0000${callId}`).digest('base64url').slice(0, 32)}`;
}

/** The approval of the call whose effect key this is (`apr_` and 26 characters): the same id whenever the call asks again. */
export function approvalIdOf(effectKey: string): string {
  return `apr_${createHash('sha256').update(`approval\u0000${effectKey}`).digest('base64url').slice(0, 26)}`;
}
