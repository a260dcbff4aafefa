/**
 * The Activation registry: at most one process-local Activation per continuable in-process
 * child, keyed by the child's id and bound to one exact incarnation, and the index of agents
 * known (durably) to have continuable children, which see send_message and list_agents.
 *
 * An Activation's state is derived, never stored: `running` (an open turn, or queued or
 * steering work accepted and not yet taken up), `waiting` (quiescent but owning live
 * children), `settled` (neither: it may leave the live registry; its session stays, and a
 * followup from its live parent cold-resumes it). Whether it is being disposed is its agent's
 * lifecycle (domain/lifecycle.ts); `disposal` only memoizes the disposal in flight.
 */
import { queuedCount } from '../domain/turn-machine.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { LiveAgent } from '../agents/live-agent.js';

type DerivedActivationState = 'running' | 'waiting' | 'settled';

export interface Activation {
  readonly id: string;
  readonly agent: LiveAgent;
  /** Waking message ids accepted and not yet dequeued or discarded (derived from the inbox). */
  readonly accepted: ReadonlySet<string>;
  /** The disposal in flight (memoized), present once disposal started; null before. */
  readonly disposal: Promise<void> | null;
}

class ActivationEntry implements Activation {
  disposal: Promise<void> | null = null;

  constructor(
    readonly id: string,
    readonly agent: LiveAgent,
  ) {}

  get accepted(): ReadonlySet<string> {
    const state = this.agent.state;
    const ids = new Set(state.inbox.map((item) => item.message.id));
    for (const pending of state.pending) if (pending.kind === 'steering') ids.add(pending.item.message.id);
    return ids;
  }
}

export class Activations {
  private readonly byId = new Map<string, ActivationEntry>();
  private readonly parentsOfContinuable = new Set<string>();

  constructor(private readonly registry: AgentRegistry) {}

  /** The Activation of exactly this incarnation, if it has one. */
  of(agent: LiveAgent): Activation | undefined {
    const activation = this.byId.get(agent.id);
    return activation?.agent === agent ? activation : undefined;
  }

  get size(): number {
    return this.byId.size;
  }

  values(): Iterable<Activation> {
    return this.byId.values();
  }

  add(id: string, agent: LiveAgent): void {
    this.byId.set(agent.id, new ActivationEntry(id, agent));
  }

  /** Drop this incarnation's Activation (not a newer incarnation's). */
  remove(agent: LiveAgent): void {
    if (this.byId.get(agent.id)?.agent === agent) this.byId.delete(agent.id);
  }

  clear(): void {
    this.byId.clear();
  }

  /** Memoize the disposal in flight; returns the one already in flight, if any. */
  memoizeDisposal(activation: Activation, start: () => Promise<void>): Promise<void> {
    const entry = activation as ActivationEntry;
    return (entry.disposal ??= start());
  }

  stateOf(activation: Activation): DerivedActivationState {
    const agent = activation.agent;
    if (agent.state.turn.phase !== 'idle' || queuedCount(agent.state) > 0) return 'running';
    return this.registry.hasLiveChildren(agent.id) ? 'waiting' : 'settled';
  }

  isParentOfContinuable(id: string): boolean {
    return this.parentsOfContinuable.has(id);
  }

  markParentOfContinuable(id: string): void {
    this.parentsOfContinuable.add(id);
  }

  forgetParent(id: string): void {
    this.parentsOfContinuable.delete(id);
  }
}
