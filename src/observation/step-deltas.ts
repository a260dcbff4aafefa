/**
 * Deltas: the pieces of a step's answer while it is being written (the built-in driver's
 * streamed model answer, or what a backend posts to `.../steps/{stepId}/deltas`), published on
 * the agent's and the forest's event streams to the subscriptions that asked for them. They are
 * ephemeral: never written to a session, never replayed; the step's recorded output is what
 * counts. Each carries its step, the attempt that holds the step, and `seq`, counted from 1 per
 * step attempt, so a client can tell order and gaps.
 */
import type { LiveAgent } from '../agents/live-agent.js';

/** One piece as a producer hands it on: text, or a part of one tool call. */
export interface DeltaPiece {
  text?: string;
  toolCall?: { index: number; id?: string; name?: string; argumentsDelta?: string };
  /** What the step's earlier deltas built is void (the model request was sent again after a broken stream). */
  reset?: true;
}

/** A delta as the event streams send it (`event: delta`). */
export interface Delta extends DeltaPiece {
  agentId: string;
  stepId: string;
  attempt: number;
  seq: number;
}

/** Where deltas go (the event hub): whether anyone takes an agent's, and the handing over. */
export interface DeltaListeners {
  listensForDeltas(agentId: string, rootId: string): boolean;
  publishDelta(agentId: string, rootId: string, delta: Delta): void;
}

export class StepDeltas {
  /** Per live agent: the step attempt its deltas belong to and the last seq given. */
  private readonly positions = new WeakMap<LiveAgent, { stepId: string; attempt: number; seq: number }>();

  constructor(private readonly hub: DeltaListeners) {}

  /** Publish pieces of the answer to `stepId` held by `attempt`; returns the last seq given. */
  publish(agent: LiveAgent, stepId: string, attempt: number, pieces: readonly DeltaPiece[]): number {
    let at = this.positions.get(agent);
    if (at === undefined || at.stepId !== stepId || at.attempt !== attempt) this.positions.set(agent, (at = { stepId, attempt, seq: 0 }));
    const listening = this.hub.listensForDeltas(agent.id, agent.rootId);
    for (const piece of pieces) {
      at.seq++;
      if (listening) this.hub.publishDelta(agent.id, agent.rootId, { agentId: agent.id, stepId, attempt, seq: at.seq, ...piece });
    }
    return at.seq;
  }
}
