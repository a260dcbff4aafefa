/**
 * The event hub: fans committed session entries and agent status changes out to event-stream
 * subscribers, per agent and per forest. Entries are announced only after their batch commits,
 * so a subscriber never sees an entry that a crash could take back; each carries its durable
 * position (the session `seq` for an agent stream, the `forestSeq` for a forest stream), which
 * is what makes streams resumable from the log. Status events are snapshots, sent when they
 * change; they carry no position, and they too wait for the writes of the change to commit
 * (they go out on the turn after the log's group commit). Deltas (step-deltas.ts) go only to
 * listeners that asked for them, at once: they are no writes, and nothing waits for them.
 */
import type { AgentStatus } from '../domain/agent.js';
import type { PausedBy } from '../domain/budget.js';
import type { SessionEntry } from '../domain/session.js';
import { isClaimable } from '../domain/turn-machine.js';
import type { RuntimeObserver } from './runtime-observer.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { BatchEntry } from '../sessions/session-store.js';
import type { AgentView } from '../contract/index.js';
import type { Delta } from './step-deltas.js';

export interface StatusEvent {
  agentId: string;
  status: AgentStatus;
  resident: boolean;
  inbox: { queued: number };
  staged: number;
  /**
   * A step can be claimed now: a parked driver may claim instead of long-polling. Never for an
   * agent the built-in driver runs: its steps are the driver's.
   */
  claimable: boolean;
}

/** The status snapshot of an agent from its view; `live` is its incarnation when resident. */
export function statusEvent(view: AgentView, live: LiveAgent | undefined): StatusEvent {
  return {
    agentId: view.id,
    status: view.status,
    resident: view.resident,
    inbox: view.inbox,
    staged: view.staged,
    claimable: live !== undefined && !live.disposing && live.header.model === undefined && isClaimable(live.state) && view.status !== 'paused',
  };
}

/** A budget stopped an agent's next step (sent once per pause; see budgets.ts). */
export interface BudgetExhaustedEvent {
  agentId: string;
  pausedBy: PausedBy;
}

export type HubEvent =
  | { kind: 'entry'; agentId: string; rootId: string; seq: number; forestSeq: number; entry: SessionEntry }
  | { kind: 'status'; rootId: string; status: StatusEvent }
  | { kind: 'budget-exhausted'; rootId: string; event: BudgetExhaustedEvent }
  /** The pieces one publication gave (a backend's request, a driver's piece), in order. */
  | { kind: 'deltas'; rootId: string; deltas: readonly Delta[] };

export type HubListener = (event: HubEvent) => void;

export interface EventHubDeps {
  /** The agent view of a live agent (status, inbox, staged). */
  viewOf: (agent: LiveAgent) => AgentView;
}

export class EventHub {
  private readonly byAgent = new Map<string, Set<HubListener>>();
  private readonly byForest = new Map<string, Set<HubListener>>();
  /** The listeners of each kind that also take deltas. */
  private readonly deltasByAgent = new Map<string, Set<HubListener>>();
  private readonly deltasByForest = new Map<string, Set<HubListener>>();
  /** The last status sent per agent, so unchanged snapshots are not repeated. */
  private readonly lastStatus = new Map<string, string>();
  private readonly closers = new Set<() => void>();
  /** Status snapshots waiting for the writes behind them to commit. */
  private readonly dirty = new Map<string, { rootId: string; status: () => StatusEvent | undefined }>();
  private flushScheduled = false;
  private closedForDrain = false;

  constructor(private readonly deps: EventHubDeps) {}

  /** What the hub hears of the runtime (the observer list in the wiring). */
  readonly observer: RuntimeObserver = {
    committed: (batch) => this.committed(batch.entries),
    agentAdded: (agent) => this.agentChanged(agent),
    agentChanged: (agent) => this.agentChanged(agent),
    agentLeft: (agent, became) => this.agentLeft(agent, became),
    budgetExhausted: (agent, pausedBy) => this.budgetExhausted(agent, pausedBy),
    budgetResumed: (agent) => this.agentChanged(agent),
    draining: () => this.closeAll(),
  };

  /**
   * Listen to one agent's events, or (forest) to every agent of one root, deltas included when
   * asked. Returns the unsubscribe.
   */
  subscribe(target: { agentId: string } | { rootId: string }, listener: HubListener, options: { deltas?: boolean } = {}): () => void {
    const key = 'agentId' in target ? target.agentId : target.rootId;
    const maps = 'agentId' in target ? [this.byAgent] : [this.byForest];
    if (options.deltas === true) maps.push('agentId' in target ? this.deltasByAgent : this.deltasByForest);
    const leaves = maps.map((map) => {
      let set = map.get(key);
      if (set === undefined) map.set(key, (set = new Set()));
      set.add(listener);
      return () => {
        set.delete(listener);
        if (set.size === 0) map.delete(key);
      };
    });
    return () => {
      for (const leave of leaves) leave();
    };
  }

  /** Whether anyone takes the deltas of this agent. */
  listensForDeltas(agentId: string, rootId: string): boolean {
    return this.deltasByAgent.has(agentId) || this.deltasByForest.has(rootId);
  }

  /** Hand deltas to the listeners that take deltas, at once. */
  publishDeltas(agentId: string, rootId: string, deltas: readonly Delta[]): void {
    const event: HubEvent = { kind: 'deltas', rootId, deltas };
    for (const listener of this.deltasByAgent.get(agentId) ?? []) listener(event);
    for (const listener of this.deltasByForest.get(rootId) ?? []) listener(event);
  }

  /** Register how to end a stream when the service drains; returns the unregister. */
  onClose(close: () => void): () => void {
    if (this.closedForDrain) {
      close();
      return () => undefined;
    }
    this.closers.add(close);
    return () => this.closers.delete(close);
  }

  /** End every open stream (draining): clients resume elsewhere from their last event id. */
  closeAll(): void {
    this.closedForDrain = true;
    for (const close of [...this.closers]) close();
  }

  /** True once the service drains: no new stream is opened. */
  get closed(): boolean {
    return this.closedForDrain;
  }

  get streams(): number {
    return this.closers.size;
  }

  /** A live agent changed: send its status if anyone listens and it differs from the last one. */
  agentChanged(agent: LiveAgent): void {
    if (!this.byAgent.has(agent.id) && !this.byForest.has(agent.rootId)) return;
    this.later(agent.id, agent.rootId, () => {
      if (agent.disposing && agent.state.turn.phase === 'disposed') return undefined;
      return statusEvent(this.deps.viewOf(agent), agent);
    });
  }

  /**
   * A budget paused an agent: its status goes out (now paused), then the event, after the
   * writes queued so far (the charge that spent the budget) have committed.
   */
  budgetExhausted(agent: LiveAgent, pausedBy: PausedBy): void {
    this.agentChanged(agent);
    if (!this.byAgent.has(agent.id) && !this.byForest.has(agent.rootId)) return;
    const event: HubEvent = { kind: 'budget-exhausted', rootId: agent.rootId, event: { agentId: agent.id, pausedBy } };
    setImmediate(() => this.emit(agent.id, agent.rootId, event));
  }

  /** An agent left the live registry (settled, closed, disposed, or the process stopping). */
  agentLeft(agent: LiveAgent, status: AgentStatus): void {
    if (!this.byAgent.has(agent.id) && !this.byForest.has(agent.rootId)) {
      this.lastStatus.delete(agent.id);
      return;
    }
    const snapshot: StatusEvent = { agentId: agent.id, status, resident: false, inbox: { queued: 0 }, staged: 0, claimable: false };
    this.later(agent.id, agent.rootId, () => snapshot);
  }

  /** Send an agent's status once the writes queued so far have committed (the next turn). */
  private later(agentId: string, rootId: string, status: () => StatusEvent | undefined): void {
    this.dirty.set(agentId, { rootId, status });
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      const due = [...this.dirty];
      this.dirty.clear();
      for (const [agentId, { rootId, status }] of due) {
        const snapshot = status();
        if (snapshot === undefined) continue;
        this.sendStatus(agentId, rootId, snapshot);
        if (!snapshot.resident) this.lastStatus.delete(agentId);
      }
    });
  }

  private sendStatus(agentId: string, rootId: string, status: StatusEvent): void {
    const key = JSON.stringify(status);
    if (this.lastStatus.get(agentId) === key) return;
    this.lastStatus.set(agentId, key);
    this.emit(agentId, rootId, { kind: 'status', rootId, status });
  }

  private committed(entries: readonly BatchEntry[]): void {
    for (const item of entries) {
      if (!this.byAgent.has(item.sessionId) && !this.byForest.has(item.rootId)) continue;
      this.emit(item.sessionId, item.rootId, {
        kind: 'entry',
        agentId: item.sessionId,
        rootId: item.rootId,
        seq: item.entry.seq,
        forestSeq: item.forestSeq,
        entry: item.entry,
      });
    }
  }

  private emit(agentId: string, rootId: string, event: HubEvent): void {
    for (const listener of this.byAgent.get(agentId) ?? []) listener(event);
    for (const listener of this.byForest.get(rootId) ?? []) listener(event);
  }
}
