/**
 * The interrupt rule: who may cancel whose open turn, and what an interrupt does.
 *
 * - `interrupt_agent` (a tool of the exact live incarnation of an ancestor, at any depth):
 *   the caller must be live and not being disposed, must not name itself, and the target
 *   must be a live descendant through live agents; anything else is UNAUTHORIZED. An absent,
 *   one-shot or disposing target is an accepted no-op (`false`).
 * - The operator (HTTP) interrupts any live agent, and with `subtree` every live descendant
 *   first, child-first.
 *
 * An interrupt cancels the open turn at once (turn-end `cancelled`) without waiting for
 * anything to quiesce; with `keepInbox` queued work stays queued and waits for the next waking
 * delivery. The step the turn was on is remembered as interrupted (steps/interrupted-steps.ts).
 * Each decision and its interrupt run in one synchronous span.
 */
import { ServiceError } from '../domain/errors.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { InterruptedSteps } from '../steps/interrupted-steps.js';
import type { SessionHeader } from '../domain/session.js';

export type InterruptOrigin = 'tool' | 'operator';

export interface InterruptDeps {
  registry: AgentRegistry;
  /** Where an interrupted step is remembered, so its later requests are told so after its incarnation is gone. */
  interrupted: InterruptedSteps;
  observe?: (origin: InterruptOrigin, interrupted: number) => void;
  /** The header of an agent that is not live, if it exists (AgentQueries.storedHeader). */
  storedHeader: (id: string) => Promise<SessionHeader | undefined>;
  /** Waits until the forest's writes so far committed. */
  durable: (rootId: string) => Promise<void>;
}

export class Interrupts {
  constructor(private readonly deps: InterruptDeps) {}

  /** `interrupt_agent`: true when the target's turn (or parked inbox) was interrupted. */
  fromAncestor(caller: LiveAgent, targetId: string): boolean {
    if (targetId === caller.id) throw new ServiceError('UNAUTHORIZED', `agent "${targetId}" cannot interrupt itself`);
    if (this.deps.registry.get(caller.id) !== caller || caller.disposing) {
      throw new ServiceError('UNAUTHORIZED', `interrupting "${targetId}" requires the exact live ancestor agent`);
    }
    const target = this.deps.registry.get(targetId);
    // Another tenant's agent is no agent to this one: answered as one that is not live.
    if (target === undefined || target.tenantId !== caller.tenantId) return false;
    if (!this.descendsFrom(target, caller)) {
      throw new ServiceError('UNAUTHORIZED', `subagent "${targetId}" is not a live descendant of agent "${caller.id}"`);
    }
    if (target.header.mode === 'one-shot') return false;
    const done = this.interruptOne(target, true);
    this.deps.observe?.('tool', done ? 1 : 0);
    return done;
  }

  /**
   * The operator's interrupt: agent `id`, or with `subtree` its live descendants child-first and
   * then it; the ids interrupted, once their turn-ends are durable. An agent that exists but is
   * not live has nothing to interrupt.
   */
  async byOperator(id: string, options: { keepInbox: boolean; subtree: boolean }): Promise<{ interrupted: string[] }> {
    const agent = this.deps.registry.get(id);
    if (agent === undefined) {
      if ((await this.deps.storedHeader(id)) === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
      return { interrupted: [] };
    }
    const targets = options.subtree ? [...this.deps.registry.liveDescendantsChildFirst(agent.id), agent] : [agent];
    const interrupted = targets.filter((target) => this.interruptOne(target, options.keepInbox)).map((target) => target.id);
    this.deps.observe?.('operator', interrupted.length);
    await this.deps.durable(agent.rootId);
    return { interrupted };
  }

  private interruptOne(agent: LiveAgent, keepInbox: boolean): boolean {
    const turn = agent.state.turn;
    const stepId = turn.phase === 'running' ? turn.turn.step.id : undefined;
    if (!agent.interrupt(keepInbox)) return false;
    if (stepId !== undefined) this.deps.interrupted.remember(agent.id, stepId, agent.token);
    return true;
  }

  /** `agent` descends from `ancestor` through live agents only. */
  private descendsFrom(agent: LiveAgent, ancestor: LiveAgent): boolean {
    for (let parentId = agent.header.parentSession; parentId !== null; ) {
      const parent = this.deps.registry.get(parentId);
      if (parent === undefined) return false;
      if (parent === ancestor) return true;
      parentId = parent.header.parentSession;
    }
    return false;
  }
}
