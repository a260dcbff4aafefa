/**
 * Resumable event streams of one agent or one forest. A stream replays the durable log after
 * the client's last event id, then follows live commits, with no gap and no duplicate: it
 * subscribes before it reads, so whatever commits meanwhile is queued, and every entry event
 * is filtered by its durable position. A consumer that cannot keep up is cut off (its sink
 * reports overflow) and resumes from its last event id; a replay that falls behind its own
 * queue drops the queue and reads the log again, so memory stays bounded either way.
 *
 * A stream that asks for deltas gets them once it is live (none are replayed: they were never
 * written). A consumer that is behind loses deltas before anything else: they are dropped while
 * its backlog is over the sink's delta bound, and the next event it gets is preceded by
 * `deltas-dropped` with how many it missed.
 */
import { ServiceError } from '../domain/errors.js';
import type { SessionEntry, SessionHeader } from '../domain/session.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { statusEvent, type EventHub, type HubEvent, type StatusEvent } from './event-hub.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { WaiterGate } from '../agents/limits.js';
import type { AgentView } from '../contract/index.js';
import type { Delta } from './step-deltas.js';

export interface StreamEvent {
  /** The durable position (seq, or forestSeq for a forest stream); absent for status snapshots. */
  id?: number;
  event: 'entry' | 'status' | 'budget-exhausted' | 'approval-requested' | 'approval-decided' | 'delta' | 'deltas-dropped';
  data: unknown;
}

export interface StreamSink {
  /** Write one event, or return false without writing it when the consumer is too far behind. */
  send(event: StreamEvent): boolean;
  /**
   * Whether the consumer takes these deltas (one publication's) now: false while its backlog is
   * over the delta bound, or when they would leave entries too little room.
   */
  takesDeltas(events: readonly StreamEvent[]): boolean;
  /** Resolves when the consumer has taken what was written (replay waits on it instead of cutting off). */
  drained(): Promise<void>;
}

export interface StreamTarget {
  id: string;
  forest: boolean;
  /** The stream takes deltas too (`?deltas=true`). */
  deltas?: boolean;
}

export interface EventStreamDeps {
  log: SessionLog;
  hub: EventHub;
  registry: AgentRegistry;
  /** The view of an agent, live or stored. */
  view: (id: string) => Promise<AgentView | undefined>;
  /** Bounds the open streams per agent (per root for forest streams). */
  waiters?: WaiterGate;
}

const PAGE = 500;
const MAX_QUEUE = 5_000;

export class EventStreams {
  constructor(private readonly deps: EventStreamDeps) {}

  /** Check the target exists (and is a root for a forest stream) before any response is sent. */
  async resolve(target: StreamTarget): Promise<SessionHeader> {
    const header = (await this.deps.log.summary(target.id))?.header;
    if (header === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${target.id}" does not exist`);
    if (target.forest && header.kind !== 'root') {
      throw new ServiceError('VALIDATION', `forest streams follow a root; agent "${target.id}" belongs to the forest of "${header.rootSession ?? ''}"`);
    }
    return header;
  }

  /**
   * Stream from `after` until `stop` is called or the sink overflows. Resolves with the
   * unsubscribe once the stream is live; the caller calls it when the connection ends.
   */
  /**
   * Take one of the target's stream places (AGENT_BUSY when none is left), before anything is
   * written to the client; returns the function that gives it back.
   */
  admit(target: StreamTarget): () => void {
    return this.deps.waiters?.enter(target.forest ? `forest ${target.id}` : target.id, 'event streams') ?? (() => undefined);
  }

  /** `leave` (from admit) is called when the stream ends or fails to start. */
  async start(target: StreamTarget, after: number, sink: StreamSink, onOverflow: () => void, leave: () => void = () => undefined): Promise<() => void> {
    try {
      const unsubscribe = await this.open(target, after, sink, onOverflow);
      return () => {
        unsubscribe();
        leave();
      };
    } catch (error) {
      leave();
      throw error;
    }
  }

  private async open(target: StreamTarget, after: number, sink: StreamSink, onOverflow: () => void): Promise<() => void> {
    let last = after;
    let live = false;
    let overflowed = false;
    let cut = false;
    const queue: HubEvent[] = [];
    /** Deltas this consumer missed since it was last told. */
    let dropped = 0;
    /** Tell the consumer how many deltas it missed, before the next event it gets. */
    const tellDropped = (): void => {
      if (dropped > 0 && sink.send({ event: 'deltas-dropped', data: { count: dropped } })) dropped = 0;
    };
    // A publication's pieces are taken or dropped together: a consumer keeping up gets a long
    // list whole, though it passes the delta bound on its own (the sink says whether it fits).
    const sendDeltas = (deltas: readonly Delta[]): true => {
      const events = deltas.map((delta): StreamEvent => ({ event: 'delta', data: delta }));
      if (!sink.takesDeltas(events)) {
        dropped += deltas.length;
        return true;
      }
      tellDropped();
      for (const event of events) if (!sink.send(event)) dropped++;
      return true;
    };
    /** Write one event; false only while replaying and the consumer is behind (retry after it drains). */
    const deliver = (event: HubEvent): boolean => {
      if (cut) return true;
      if (event.kind === 'deltas') return live ? sendDeltas(event.deltas) : true;
      const position = event.kind === 'entry' ? (target.forest ? event.forestSeq : event.seq) : undefined;
      if (position !== undefined && position <= last) return true;
      tellDropped();
      const ok = event.kind === 'entry'
        ? sink.send(entryEvent(position!, event.agentId, event.entry))
        : event.kind === 'status'
          ? sink.send({ event: 'status', data: event.status })
          : sink.send({ event: 'budget-exhausted', data: event.event });
      if (ok) {
        if (position !== undefined) last = position;
        return true;
      }
      if (!live) return false;
      cut = true;
      onOverflow();
      return true;
    };
    const replay = async (event: HubEvent): Promise<void> => {
      while (!deliver(event)) await sink.drained();
    };
    const unsubscribe = this.deps.hub.subscribe(target.forest ? { rootId: target.id } : { agentId: target.id }, (event) => {
      if (live) {
        deliver(event);
        return;
      }
      if (event.kind === 'deltas') return; // ephemeral: a stream still replaying was not there for it
      if (queue.length < MAX_QUEUE) queue.push(event);
      else overflowed = true;
    }, { deltas: target.deltas === true });
    try {
      for (const status of await this.snapshot(target)) await replay({ kind: 'status', rootId: target.id, status });
      for (;;) {
        await this.deps.log.settled();
        const page = target.forest
          ? (await this.deps.log.store.readForest(target.id, last, PAGE)).map((b) => ({ agentId: b.sessionId, seq: b.entry.seq, forestSeq: b.forestSeq, entry: b.entry }))
          : (await this.deps.log.store.read(target.id, last, PAGE)).map((entry) => ({ agentId: target.id, seq: entry.seq, forestSeq: 0, entry }));
        for (const e of page) await replay({ kind: 'entry', rootId: target.id, ...e });
        if (cut) break;
        if (page.length === PAGE) continue;
        if (!overflowed) break;
        // The live queue overflowed while replaying: its entries are durable, read them instead.
        overflowed = false;
        queue.length = 0;
      }
      // Queued live events go out as live ones (a consumer that is behind now is cut off); from
      // here to `live = true` nothing awaits, so no event can slip between queue and live.
      live = true;
      for (const event of queue) deliver(event);
      queue.length = 0;
      return unsubscribe;
    } catch (error) {
      unsubscribe();
      throw error;
    }
  }

  private async snapshot(target: StreamTarget): Promise<StatusEvent[]> {
    const agents = target.forest
      ? this.deps.registry.forestMembers(target.id).map((a) => a.id)
      : [target.id];
    const out: StatusEvent[] = [];
    for (const id of agents) {
      const view = await this.deps.view(id);
      if (view === undefined) continue;
      out.push(statusEvent(view, this.deps.registry.get(id)));
    }
    return out;
  }
}

/**
 * An entry as the stream sends it: an approval entry is its own event, `approval-requested`
 * while pending and `approval-decided` once it ended, with the approval as its data; every
 * other entry is an `entry` event. Either way it carries its durable position.
 */
function entryEvent(id: number, agentId: string, entry: SessionEntry): StreamEvent {
  if (entry.type === 'approval') return { id, event: entry.approval.state === 'pending' ? 'approval-requested' : 'approval-decided', data: entry.approval };
  return { id, event: 'entry', data: { agentId, entry } };
}
