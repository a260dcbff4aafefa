/**
 * The forest as the page knows it: one record per agent, keyed by id, built from agent views
 * (GET /v1/agents/...) and kept current by the forest's event stream. No DOM here: each change
 * is announced through `onChange(kind, id, detail)` so the tree view touches only that agent.
 *
 * Invariants:
 * - An agent is attached (in `agents`) only once its parent is, so the tree never shows an
 *   agent without the path to it. A view whose parent is not known yet waits in `orphans`.
 * - Events for an agent not known yet (a new child) wait, in arrival order, until its view
 *   arrives; the view is asked for with `onUnknown` (not while the first load is running: it
 *   finds them anyway).
 * - Views and events race. Every event is stamped with a counter on arrival, every view request
 *   with the counter when it was asked: a view's status fields apply only if no status-bearing
 *   event for that agent arrived since, so a late answer never undoes newer news.
 * - A report (a message with source subagent-report or subagent-notice) is kept under the agent
 *   whose session received it, its parent, once per messageId.
 */

const REPORT_SOURCES = new Set(['subagent-report', 'subagent-notice']);

/**
 * @typedef {{ messageId: string, from: string, kind: string, text: string, at: string }} Report
 * @typedef {'added' | 'changed' | 'report'} ChangeKind
 */

export class ForestModel {
  /**
   * @param {string} rootId
   * @param {{
   *   onChange: (kind: ChangeKind, id: string, detail?: Report) => void,
   *   onUnknown: (id: string) => void,
   *   onStale: (id: string) => void,
   * }} hooks onUnknown: fetch this agent's view; onStale: its usage figures changed, refetch soon
   */
  constructor(rootId, hooks) {
    this.rootId = rootId;
    this.hooks = hooks;
    /** @type {Map<string, AgentRecord>} */
    this.agents = new Map();
    /** @type {Map<string, { stamp: number, event: string, data: any }[]>} events of agents not known yet */
    this.waiting = new Map();
    /** @type {Map<string, { view: any, asked: { askedAt: number, serverTime: number } }[]>} views by the parent they wait for */
    this.orphans = new Map();
    /** @type {Set<string>} ids asked for with onUnknown and not answered */
    this.asked = new Set();
    this.clock = 0;
    this.holding = true;
  }

  /** The stamp to give a view request now (see the class comment). */
  now() {
    return this.clock;
  }

  /** The first load is done: from now on an unknown agent's view is asked for at once. */
  releaseHold() {
    this.holding = false;
    for (const id of this.waiting.keys()) this.askFor(id);
    for (const parentId of this.orphans.keys()) this.askFor(parentId);
  }

  /**
   * A view from the API. `asked`: the stamp when it was asked for and the server's time of the answer.
   * @param {any} view an AgentView
   * @param {{ askedAt: number, serverTime: number }} asked
   */
  upsertView(view, asked) {
    this.asked.delete(view.id);
    const known = this.agents.get(view.id);
    if (known !== undefined) {
      applyView(known, view, asked);
      this.hooks.onChange('changed', view.id);
      return;
    }
    if (view.id !== this.rootId && !this.agents.has(view.parentId)) {
      if (view.parentId === null) return;
      const list = this.orphans.get(view.parentId) ?? [];
      if (!list.some((o) => o.view.id === view.id)) list.push({ view, asked });
      this.orphans.set(view.parentId, list);
      this.askFor(view.parentId);
      return;
    }
    this.attach(view, asked);
  }

  /** The agent's view cannot be had (404): drop what waited for it. */
  forget(id) {
    this.asked.delete(id);
    this.waiting.delete(id);
    this.orphans.delete(id);
  }

  /** @param {{ event: string, data: any }} event one event of the forest stream */
  apply({ event, data }) {
    if (event !== 'entry' && event !== 'status' && event !== 'budget-exhausted') return;
    const stamp = ++this.clock;
    const agent = this.agents.get(data.agentId);
    if (agent === undefined) {
      const list = this.waiting.get(data.agentId) ?? [];
      list.push({ stamp, event, data });
      this.waiting.set(data.agentId, list);
      this.askFor(data.agentId);
      return;
    }
    this.applyTo(agent, { stamp, event, data });
  }

  /** Ancestors of `id`, nearest first. */
  ancestors(id) {
    const out = [];
    for (let at = this.agents.get(id)?.parentId; at !== null && at !== undefined; at = this.agents.get(at)?.parentId) out.push(at);
    return out;
  }

  /** How many agents per status. */
  counts() {
    /** @type {Record<string, number>} */
    const out = {};
    for (const agent of this.agents.values()) out[agent.status] = (out[agent.status] ?? 0) + 1;
    return out;
  }

  /** @private */
  askFor(id) {
    if (this.holding || this.agents.has(id) || this.asked.has(id)) return;
    this.asked.add(id);
    this.hooks.onUnknown(id);
  }

  /** @private */
  attach(view, asked) {
    const agent = new AgentRecord(view.id);
    applyView(agent, view, asked);
    this.agents.set(agent.id, agent);
    const parent = agent.parentId === null ? undefined : this.agents.get(agent.parentId);
    if (parent !== undefined && agent.id !== this.rootId) {
      insertSorted(parent.children, agent, this.agents);
      this.hooks.onChange('changed', parent.id);
    }
    this.hooks.onChange('added', agent.id);
    const waited = this.waiting.get(agent.id) ?? [];
    this.waiting.delete(agent.id);
    for (const item of waited) this.applyTo(agent, item, asked.askedAt);
    const orphans = this.orphans.get(agent.id) ?? [];
    this.orphans.delete(agent.id);
    for (const orphan of orphans) this.upsertView(orphan.view, orphan.asked);
  }

  /**
   * @private
   * @param {number} [viewAskedAt] for events that waited for the view: only those newer than
   *   the view's request may change the status the view gave
   */
  applyTo(agent, { stamp, event, data }, viewAskedAt = 0) {
    const newer = stamp > viewAskedAt;
    if (event === 'status') {
      if (!newer) return;
      agent.status = data.status;
      agent.resident = data.resident;
      agent.inbox = data.inbox?.queued ?? 0;
      agent.staged = data.staged ?? 0;
      agent.claimable = data.claimable === true;
      if (agent.status !== 'paused') agent.pausedBy = undefined;
      agent.statusStamp = stamp;
    } else if (event === 'budget-exhausted') {
      if (!newer) return;
      agent.status = 'paused';
      agent.pausedBy = data.pausedBy;
      agent.statusStamp = stamp;
    } else {
      this.applyEntry(agent, data.entry, stamp, newer);
    }
    this.hooks.onChange('changed', agent.id);
  }

  /** @private */
  applyEntry(agent, entry, stamp, newer) {
    agent.lastEntryAt = entry.at;
    if (trackToolCalls(agent, entry)) agent.toolStamp = stamp;
    if (entry.type === 'activation' && newer && (entry.event === 'settled' || entry.event === 'closed')) {
      agent.status = entry.event;
      agent.resident = false;
      agent.claimable = false;
      agent.statusStamp = stamp;
    }
    if (entry.type === 'message' && REPORT_SOURCES.has(entry.source?.kind) && !agent.reportIds.has(entry.messageId)) {
      const blocks = Array.isArray(entry.content) ? entry.content.map((b) => b.text) : [];
      /** @type {Report} */
      const report = {
        messageId: entry.messageId,
        from: entry.source.senderSessionId ?? '',
        kind: entry.source.kind,
        // The first block is the service's heading ("Background subagent <id> reported:").
        text: blocks.slice(1).join('\n'),
        at: entry.at,
      };
      agent.reportIds.add(report.messageId);
      agent.reports.push(report);
      this.hooks.onChange('report', agent.id, report);
    }
    // What it spent changed after its view was read: its figures and its ancestors' subtrees.
    const spends = entry.type === 'step-start' || (entry.type === 'message' && entry.usage !== undefined);
    if (spends && Date.parse(entry.at) >= agent.viewTime) {
      for (const id of [agent.id, ...this.ancestors(agent.id)]) this.hooks.onStale(id);
    }
  }
}

/** One agent as shown: its view's fields, kept current by the stream. */
export class AgentRecord {
  constructor(id) {
    this.id = id;
    /** @type {string | null} */
    this.parentId = null;
    this.kind = 'child';
    /** @type {string | null} */
    this.mode = null;
    /** @type {string | null} */
    this.provider = null;
    /** @type {string | undefined} */
    this.label = undefined;
    this.depth = 0;
    this.createdAt = '';
    this.status = 'idle';
    this.resident = false;
    this.inbox = 0;
    this.staged = 0;
    this.claimable = false;
    /** @type {{ agentId: string, budget: string } | undefined} */
    this.pausedBy = undefined;
    /** @type {Map<string, string>} the open step's tool calls without a result: id → tool name */
    this.toolCalls = new Map();
    /** The stamp of the newest entry that changed `toolCalls`: an older view's `awaiting` may not. */
    this.toolStamp = 0;
    /** @type {{ self: any, subtree: any } | undefined} */
    this.usage = undefined;
    this.budget = null;
    /** @type {string[]} children ids in creation order */
    this.children = [];
    /** @type {Report[]} */
    this.reports = [];
    this.reportIds = new Set();
    this.lastEntryAt = '';
    /** The server's time (ms) of the newest view; entries from before it are in its figures. */
    this.viewTime = 0;
    this.statusStamp = 0;
  }
}

/**
 * The tool calls the agent waits on, from its entries as they stream: an output's calls wait
 * until each has its result, and a turn's end or its next step means none does. Returns
 * whether the entry was one of those.
 */
function trackToolCalls(agent, entry) {
  if (entry.type === 'turn-end' || entry.type === 'step-start') {
    agent.toolCalls.clear();
    return true;
  }
  if (entry.type !== 'message') return false;
  if (entry.role === 'assistant') for (const call of entry.toolCalls ?? []) agent.toolCalls.set(call.id, call.name);
  if (entry.role === 'tool' && entry.toolCallId !== undefined) agent.toolCalls.delete(entry.toolCallId);
  return entry.role === 'assistant' || entry.role === 'tool';
}

function applyView(agent, view, { askedAt, serverTime }) {
  agent.parentId = view.parentId;
  agent.kind = view.kind;
  agent.mode = view.mode;
  agent.provider = view.provider;
  agent.label = view.label;
  agent.depth = view.depth;
  agent.createdAt = view.createdAt;
  agent.usage = view.usage;
  agent.budget = view.budget;
  agent.viewTime = Math.max(agent.viewTime, serverTime);
  // What it waits on when the page opened; entries streamed since tell better.
  if (agent.toolStamp <= askedAt) agent.toolCalls = new Map((view.awaiting ?? []).map((call) => [call.id, call.name]));
  if (agent.statusStamp > askedAt) return;
  agent.status = view.status;
  agent.resident = view.resident;
  agent.inbox = view.inbox.queued;
  agent.staged = view.staged;
  agent.pausedBy = view.pausedBy;
}

/** Inserts `agent`'s id among its siblings in creation order (then id), as the API lists them. */
function insertSorted(siblings, agent, agents) {
  if (siblings.includes(agent.id)) return;
  const before = (a, b) => a.createdAt < b.createdAt || (a.createdAt === b.createdAt && a.id < b.id);
  let at = siblings.length;
  while (at > 0 && before(agent, agents.get(siblings[at - 1]))) at--;
  siblings.splice(at, 0, agent.id);
}
