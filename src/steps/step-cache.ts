/**
 * A step's messages at a cost proportional to what is new since the agent's last step. The log
 * is append-only, so a step's messages are the previous step's plus the entries after it (until
 * a compaction entry starts them over). Per live agent this keeps:
 *
 * - the marks of its recent steps (where each was cut, how many messages it held, their digest
 *   and size, the compaction it started from): a claim `since` one of them renders only the
 *   entries after it (`messagesSince`);
 * - for full claims, the JSON of its rendered conversation, extended by the entries after the
 *   last one rendered, and built from the store when absent (from its latest compaction on:
 *   what a compaction summarised is never read again).
 *
 * The JSON is bounded in total (the least recently used agent's goes first), dropped when the
 * agent leaves memory and, when small, when its turn ends; an agent whose backend claims delta
 * steps keeps none. Exact by
 * construction: the result always equals `renderMessages` over the log up to the step
 * (test/services/step-cache.test.ts checks it on random logs).
 */
import { createHash } from 'node:crypto';
import { headMessages, renderEntry } from '../domain/step-render.js';
import type { CompactionEntry, SessionEntry } from '../domain/session.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';

/** Where one step was cut and what its messages were (a compaction after it shows in the entries read since). */
export interface StepMark {
  stepId: string;
  /** The seq of its step-start: its messages are the log up to here. */
  upToSeq: number;
  /** UTF-8 bytes of the messages' JSON texts. */
  bytes: number;
  /** The digest chain over the messages' JSON texts (see chainDigest). */
  digest: string;
}

/** One step's messages as JSON text, ready to send: the whole list, or (delta) what follows `since`. */
export interface RenderedMessages {
  /** The JSON array, in pieces to send in order. */
  json: Buffer[];
  /** True when `json` holds only the messages after the `since` step's. */
  delta: boolean;
  mark: StepMark;
}

/** What the rendered conversations of all agents may hold by default: 256 MiB. */
export const DEFAULT_STEP_CACHE_BYTES = 256 * 2 ** 20;

/**
 * A conversation smaller than this is dropped when its agent's turn ends: an idle agent keeps
 * none, and building it again at the next turn reads only a few entries.
 */
export const KEEP_IDLE_FROM_BYTES = 16 * 1024;

/** Marks kept per agent: a backend names its previous step; a few more cover retries. */
const MARKS_KEPT = 2;
/** An agent's first JSON buffer holds at least this much, so that small conversations rarely grow. */
const MIN_CAPACITY = 1024;

/**
 * The digest of a message list: SHA-256 chained over each message's JSON text, in hex, from
 * the empty string: `d = sha256(d + json(message))`. A backend holding the list can check it.
 */
export function chainDigest(previous: string, json: string): string {
  return createHash('sha256').update(previous).update(json).digest('hex');
}

/** One agent's rendered conversation: the head (instructions, summary) and the messages after it, as JSON. */
class Conversation {
  /** `,m1,m2,…`: each message's JSON with a comma before it. */
  private buffer: Buffer;
  private length = 0;

  private constructor(
    private readonly head: string,
    public through: number,
    public bytes: number,
    public digest: string,
  ) {
    this.buffer = Buffer.allocUnsafeSlow(MIN_CAPACITY);
  }

  /** The head messages of a session from its latest compaction (or none) on. */
  static start(instructions: string | undefined, compaction: CompactionEntry | undefined): Conversation {
    const texts = headMessages(instructions, compaction?.summary).map((m) => JSON.stringify(m));
    let digest = '';
    let bytes = 0;
    for (const text of texts) {
      digest = chainDigest(digest, text);
      bytes += Buffer.byteLength(text);
    }
    return new Conversation(texts.join(','), compaction?.throughSeq ?? 0, bytes, digest);
  }

  get capacity(): number {
    return this.buffer.length;
  }

  /** Fold in entries after `through`, in order; none of them is a compaction. */
  extend(entries: readonly SessionEntry[]): void {
    if (entries.length === 0) return;
    const tail = encode(entries, this.digest);
    this.reserve(tail.size);
    this.buffer.write(tail.text, this.length, 'utf8');
    this.length += tail.size;
    this.bytes += tail.bytes;
    this.digest = tail.digest;
    this.through = entries[entries.length - 1]!.seq;
  }

  /** The messages as one JSON array, in pieces (the body is a view, not a copy). */
  json(): Buffer[] {
    if (this.head === '') return [Buffer.from('['), this.buffer.subarray(this.length === 0 ? 0 : 1, this.length), Buffer.from(']')];
    return [Buffer.from(`[${this.head}`), this.buffer.subarray(0, this.length), Buffer.from(']')];
  }

  mark(stepId: string): StepMark {
    return { stepId, upToSeq: this.through, bytes: this.bytes, digest: this.digest };
  }

  private reserve(more: number): void {
    if (this.length + more <= this.buffer.length) return;
    const grown = Buffer.allocUnsafeSlow(Math.max(this.buffer.length * 2, this.length + more));
    this.buffer.copy(grown, 0, 0, this.length);
    this.buffer = grown;
  }
}

/**
 * Entries' messages as `,m1,m2…` JSON text, with the digest chain continued from `digest`:
 * its UTF-8 size, and the messages' own bytes (the size less one comma each).
 */
function encode(entries: readonly SessionEntry[], digest: string): { text: string; size: number; bytes: number; digest: string } {
  let text = '';
  let count = 0;
  for (const entry of entries) {
    const message = renderEntry(entry);
    if (message === undefined) continue;
    const json = JSON.stringify(message);
    digest = chainDigest(digest, json);
    text += `,${json}`;
    count++;
  }
  const size = Buffer.byteLength(text);
  return { text, size, bytes: size - count, digest };
}

interface AgentRenders {
  marks: StepMark[];
  conversation?: Conversation;
}

export class StepCache {
  /** Per live agent that claimed a step; in least-recently-used order (Map order). */
  private readonly agents = new Map<LiveAgent, AgentRenders>();
  private heldBytes = 0;

  constructor(
    private readonly log: SessionLog,
    /** The most the conversations' JSON may hold in total. */
    private readonly budgetBytes: number,
  ) {}

  /**
   * The messages of `agent`'s step cut at `upToSeq`: after `since` when that names one of its
   * recent steps and no compaction came in between, else the whole list.
   */
  async render(agent: LiveAgent, stepId: string, upToSeq: number, since?: string): Promise<RenderedMessages> {
    const renders = this.touch(agent);
    const from = since === undefined ? undefined : renders.marks.find((m) => m.stepId === since && m.upToSeq <= upToSeq);
    if (from !== undefined) {
      const entries = await this.log.read(agent.id, from.upToSeq, upToSeq - from.upToSeq);
      if (!entries.some((e) => e.type === 'compaction')) {
        const tail = encode(entries, from.digest);
        const mark: StepMark = { stepId, upToSeq, bytes: from.bytes + tail.bytes, digest: tail.digest };
        this.remember(renders, mark);
        this.dropConversation(renders); // its backend keeps the conversation
        return { json: [Buffer.from(`[${tail.text.slice(1)}]`)], delta: true, mark };
      }
    }
    const conversation = await this.conversationAt(agent, renders, upToSeq);
    const mark = conversation.mark(stepId);
    this.remember(renders, mark);
    return { json: conversation.json(), delta: false, mark };
  }

  /** The agent's turn ended: a small conversation is not kept while it is idle. */
  turnEnded(agent: LiveAgent): void {
    const renders = this.agents.get(agent);
    if (renders?.conversation !== undefined && renders.conversation.capacity < KEEP_IDLE_FROM_BYTES) this.dropConversation(renders);
  }

  /** Drop what is kept for an agent that left memory. */
  forget(agent: LiveAgent): void {
    const renders = this.agents.get(agent);
    if (renders === undefined) return;
    this.dropConversation(renders);
    this.agents.delete(agent);
  }

  /** The agent's conversation extended to `upToSeq`, kept when it fits the budget. */
  private async conversationAt(agent: LiveAgent, renders: AgentRenders, upToSeq: number): Promise<Conversation> {
    const kept = renders.conversation;
    if (kept !== undefined && kept.through <= upToSeq) {
      const through = kept.through;
      const entries = await this.log.read(agent.id, through, upToSeq - through);
      // Another claim's render may have moved it meanwhile (only an expired lease's re-claim can).
      if (renders.conversation === kept && kept.through === through && !entries.some((e) => e.type === 'compaction')) {
        const before = kept.capacity;
        kept.extend(entries);
        this.heldBytes += kept.capacity - before;
        this.evict(renders);
        return kept;
      }
    }
    const built = await this.build(agent, upToSeq);
    // Kept unless the agent left memory or a newer one was kept meanwhile.
    const current = renders.conversation;
    if (this.agents.get(agent) === renders && (current === undefined || current.through <= built.through)) {
      this.dropConversation(renders);
      if (built.capacity <= this.budgetBytes) {
        renders.conversation = built;
        this.heldBytes += built.capacity;
        this.evict(renders);
      }
    }
    return built;
  }

  /** From the store: the head from the latest compaction at or before `upToSeq`, then what follows it. */
  private async build(agent: LiveAgent, upToSeq: number): Promise<Conversation> {
    const compaction = await this.log.lastCompaction(agent.id, upToSeq);
    const after = compaction?.throughSeq ?? 0;
    const entries = await this.log.read(agent.id, after, upToSeq - after);
    const conversation = Conversation.start(agent.header.instructions, compaction);
    conversation.extend(entries);
    conversation.through = upToSeq;
    return conversation;
  }

  private touch(agent: LiveAgent): AgentRenders {
    let renders = this.agents.get(agent);
    if (renders === undefined) renders = { marks: [] };
    else this.agents.delete(agent);
    this.agents.set(agent, renders);
    return renders;
  }

  private remember(renders: AgentRenders, mark: StepMark): void {
    const marks = renders.marks.filter((m) => m.stepId !== mark.stepId);
    marks.push(mark);
    renders.marks = marks.length > MARKS_KEPT ? marks.slice(-MARKS_KEPT) : marks;
  }

  private dropConversation(renders: AgentRenders): void {
    if (renders.conversation === undefined) return;
    this.heldBytes -= renders.conversation.capacity;
    delete renders.conversation;
  }

  /** Over budget: drop the least recently used agents' conversations, `keep`'s last. */
  private evict(keep: AgentRenders): void {
    for (const renders of this.agents.values()) {
      if (this.heldBytes <= this.budgetBytes) return;
      if (renders !== keep) this.dropConversation(renders);
    }
    if (this.heldBytes > this.budgetBytes) this.dropConversation(keep);
  }
}
