/**
 * Agent authority: a caller acts as an agent only with the token of that agent's exact live
 * incarnation (an object in the registry, never an id string alone).
 *
 * Invariant: `liveWithToken` answers synchronously, so the operation that acts can check and
 * act in one synchronous span (`liveWithToken(id, t) ?? await rejectCredential(id)`); only the
 * failure path awaits, to tell a missing agent (AGENT_NOT_FOUND) from a wrong token
 * (UNAUTHORIZED).
 */
import { ServiceError } from '../domain/errors.js';
import type { AgentRegistry } from './agent-registry.js';
import type { LiveAgent } from './live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';

export interface AuthorityDeps {
  registry: AgentRegistry;
  log: SessionLog;
}

export class AgentAuthority {
  constructor(private readonly deps: AuthorityDeps) {}

  /** The token of an agent's live incarnation, or '' when it is not resident. */
  currentToken(id: string): string {
    return this.deps.registry.get(id)?.token ?? '';
  }

  /** Authenticate an agent token: the exact live incarnation, or 404/403. */
  async authenticate(id: string, token: string | undefined): Promise<LiveAgent> {
    return this.liveWithToken(id, token) ?? (await this.rejectCredential(id));
  }

  /**
   * The exact live incarnation this token belongs to, synchronously, so callers can act in
   * the same synchronous span: `liveWithToken(id, t) ?? await rejectCredential(id)`.
   */
  liveWithToken(id: string, token: string | undefined): LiveAgent | undefined {
    const agent = this.deps.registry.get(id);
    return agent !== undefined && agent.authenticates(token) ? agent : undefined;
  }

  /** Throws AGENT_NOT_FOUND for an unknown id, UNAUTHORIZED otherwise. */
  async rejectCredential(id: string): Promise<never> {
    if (this.deps.registry.get(id) === undefined && (await this.deps.log.summary(id))?.header === undefined) {
      throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    }
    throw new ServiceError('UNAUTHORIZED', `agent "${id}" requires the token of its live incarnation`);
  }
}
