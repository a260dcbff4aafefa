/**
 * What driven agents' models are writing right now, assembled from the forest stream's `delta`
 * events (asked for with `deltas=true`): one draft per agent, for its current step attempt, with
 * the text and each tool call's name and arguments so far. Deltas are live only (never stored,
 * never replayed); the committed assistant message takes the draft's place. No DOM here.
 *
 * Invariants:
 * - A draft belongs to one step attempt (stepId, attempt): a delta of another one starts a new
 *   draft, so one step's text never runs on into the next step's.
 * - Deltas apply in `seq` order, each once: one at or below the last applied is ignored. A
 *   skipped `seq` (deltas dropped for a slow page, or a page that connected mid-step) leaves a
 *   hole: the draft keeps what it has, goes on with what comes next after a HOLE mark, and says
 *   it is incomplete. So a `deltas-dropped` event needs nothing more: the next delta of a draft
 *   that lost some shows the hole, and the committed message brings the whole answer.
 * - `reset` discards what was assembled (the model request was retried after a broken stream)
 *   and starts again from that delta's content, holes and all.
 * - A step attempt ends, for the page, at the agent's assistant message, its turn's end or the
 *   start of another step attempt: its draft goes, and a late delta of it starts nothing.
 */

/** Where pieces are missing from a draft. */
export const HOLE = '…';

/**
 * @typedef {{ index: number, id: string | undefined, name: string, args: string }} DraftCall
 * @typedef {{ index: number, id?: string, name?: string, argumentsDelta?: string }} ToolCallDelta
 * @typedef {{ agentId: string, stepId: string, attempt?: number, seq: number, text?: string, toolCall?: ToolCallDelta, reset?: boolean }} Delta
 */

/** One step attempt's answer as far as its deltas tell. */
export class Draft {
  /** @param {Delta} delta the first delta of the attempt this page received */
  constructor(delta) {
    this.agentId = delta.agentId;
    this.stepId = delta.stepId;
    this.attempt = delta.attempt ?? 1;
    this.key = attemptKey(delta.stepId, delta.attempt);
    /** The last seq applied: the attempt's deltas count from 1. */
    this.seq = 0;
    this.text = '';
    /** @type {DraftCall[]} by index */
    this.calls = [];
    /** Whether pieces are missing (see HOLE). */
    this.incomplete = false;
    /** A hole waits to be marked where the next piece goes. */
    this.holeOpen = false;
  }

  /**
   * @param {Delta} delta one of this attempt's
   * @returns {boolean} whether it changed the draft
   */
  add(delta) {
    if (delta.seq <= this.seq) return false;
    if (delta.reset === true) {
      this.text = '';
      this.calls = [];
      this.incomplete = false;
      this.holeOpen = false;
    } else if (delta.seq !== this.seq + 1) {
      this.incomplete = true;
      this.holeOpen = true;
    }
    this.seq = delta.seq;
    if (typeof delta.text === 'string' && delta.text !== '') this.text += this.hole() + delta.text;
    if (delta.toolCall !== undefined) this.addCall(delta.toolCall);
    return true;
  }

  /** @private */
  addCall({ index, id, name, argumentsDelta }) {
    let call = this.calls.find((c) => c.index === index);
    if (call === undefined) {
      call = { index, id: undefined, name: '', args: '' };
      this.calls.push(call);
      this.calls.sort((a, b) => a.index - b.index);
    }
    if (typeof id === 'string') call.id = id;
    if (typeof name === 'string') call.name = name;
    if (typeof argumentsDelta === 'string' && argumentsDelta !== '') call.args += this.hole() + argumentsDelta;
  }

  /** @private The mark of an open hole, once, before the first piece after it. */
  hole() {
    if (!this.holeOpen) return '';
    this.holeOpen = false;
    return HOLE;
  }
}

/** Every agent's draft, kept from the forest stream's events. */
export class Drafts {
  constructor() {
    /** @type {Map<string, Draft>} */
    this.byAgent = new Map();
    /** @type {Map<string, string>} per agent, the attempt whose draft ended last */
    this.ended = new Map();
  }

  /** @param {string} agentId */
  get(agentId) {
    return this.byAgent.get(agentId);
  }

  /**
   * One event of the forest stream.
   * @param {{ event: string, data: any }} event
   * @returns {string | undefined} the agent whose draft it changed
   */
  apply({ event, data }) {
    if (event === 'delta') return this.applyDelta(data) ? data.agentId : undefined;
    if (event === 'entry') return this.applyEntry(data.agentId, data.entry) ? data.agentId : undefined;
    return undefined;
  }

  /** @private @param {Delta} delta */
  applyDelta(delta) {
    const key = attemptKey(delta.stepId, delta.attempt);
    if (this.ended.get(delta.agentId) === key) return false;
    let draft = this.byAgent.get(delta.agentId);
    if (draft?.key !== key) {
      if (draft !== undefined) this.ended.set(draft.agentId, draft.key);
      draft = new Draft(delta);
      this.byAgent.set(delta.agentId, draft);
    }
    return draft.add(delta);
  }

  /** @private Whether the entry ended the agent's draft. */
  applyEntry(agentId, entry) {
    const draft = this.byAgent.get(agentId);
    if (draft === undefined) return false;
    const ends =
      (entry.type === 'message' && entry.role === 'assistant') ||
      entry.type === 'turn-end' ||
      (entry.type === 'step-start' && attemptKey(entry.stepId, entry.attempt) !== draft.key);
    if (!ends) return false;
    this.byAgent.delete(agentId);
    this.ended.set(agentId, draft.key);
    return true;
  }
}

/** A step attempt's identity; an attempt not given is the first. */
function attemptKey(stepId, attempt) {
  return `${stepId}#${attempt ?? 1}`;
}
