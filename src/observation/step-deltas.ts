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
  publishDeltas(agentId: string, rootId: string, deltas: readonly Delta[]): void;
}

export class StepDeltas {
  /** Per live agent: the step attempt its deltas belong to and the last seq given. */
  private readonly positions = new WeakMap<LiveAgent, { stepId: string; attempt: number; seq: number }>();

  constructor(private readonly hub: DeltaListeners) {}

  /** Publish pieces of the answer to `stepId` held by `attempt`; returns the last seq given. */
  publish(agent: LiveAgent, stepId: string, attempt: number, pieces: readonly DeltaPiece[]): number {
    const known = this.positions.get(agent);
    const last = known !== undefined && known.stepId === stepId && known.attempt === attempt ? known.seq : 0;
    this.positions.set(agent, { stepId, attempt, seq: last + pieces.length });
    if (this.hub.listensForDeltas(agent.id, agent.rootId)) {
      this.hub.publishDeltas(agent.id, agent.rootId, pieces.map((piece, i): Delta => ({ agentId: agent.id, stepId, attempt, seq: last + i + 1, ...piece })));
    }
    return last + pieces.length;
  }
}
