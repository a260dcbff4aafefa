/**
 * The session reader beside the tree: the chosen agent's durable session
 * (GET /v1/agents/{id}/session, PAGE entries at a time, `after` the last seq shown) as a
 * transcript, and, once the last page is read, the agent's new entries from the forest stream
 * as they arrive. Entries are shown in seq order, each once: stream entries that arrive while a
 * page loads wait for it, and a gap (entries not read yet) is left for "Load more". An approval
 * of the agent is an entry of its session too, but its stream event does not carry the entry's
 * seq: it makes the panel read the session on from the last entry shown.
 *
 * Below the transcript, once it reaches the present, the agent's draft (deltas.js): what its
 * model is writing of the open step, growing as deltas arrive, until the committed assistant
 * message takes its place.
 */
import { getJson } from './api.js';
import { el, replaceChildren, setText } from './dom.js';
import { DraftBubble } from './draft-bubble.js';
import { renderEntry } from './transcript.js';

const PAGE = 200;

export class SessionPanel {
  /**
   * @param {{
   *   nameOf: (id: string) => string,
   *   onSelect: (id: string) => void,
   *   onClose: () => void,
   *   draftOf: (id: string) => import('./deltas.js').Draft | undefined,
   * }} hooks
   */
  constructor(hooks) {
    this.hooks = hooks;
    this.title = el('h2', { class: 'panel-title' });
    this.meta = el('div', { class: 'panel-meta' });
    this.entries = el('ol', { class: 'transcript' });
    this.drafting = el('ol', { class: 'drafting', 'aria-label': 'Being written' });
    /** @type {DraftBubble | undefined} */
    this.bubble = undefined;
    this.more = el('button', { type: 'button', class: 'more', text: 'Load more', hidden: true, onclick: () => void this.loadPage() });
    this.state = el('p', { class: 'panel-state' });
    const close = el('button', { type: 'button', class: 'close', title: 'Close', 'aria-label': 'Close the session', text: '×', onclick: () => this.close() });
    this.element = el('aside', { class: 'session-panel', hidden: true, 'aria-label': 'Session' }, el('div', { class: 'panel-head' }, this.title, close), this.meta, this.entries, this.drafting, this.state, this.more);
    /** @type {string | undefined} */
    this.agentId = undefined;
    this.generation = 0;
  }

  /**
   * @param {string} id
   * @param {import('./forest-model.js').AgentRecord | undefined} agent
   */
  open(id, agent) {
    this.agentId = id;
    this.generation++;
    this.lastSeq = 0;
    this.atEnd = false;
    this.loading = false;
    /** An approval's event arrived while a page was loading: read on once it is in. */
    this.reread = false;
    /** @type {any[]} stream entries that arrived while a page was loading */
    this.buffered = [];
    this.context = { nameOf: this.hooks.nameOf, onSelect: this.hooks.onSelect, toolNames: new Map() };
    this.element.hidden = false;
    this.element.dataset.agentId = id;
    replaceChildren(this.entries);
    this.showDraft();
    this.refreshHeader(agent);
    void this.loadPage();
  }

  close() {
    this.agentId = undefined;
    this.generation++;
    this.element.hidden = true;
    this.hooks.onClose();
  }

  /** @param {import('./forest-model.js').AgentRecord | undefined} agent */
  refreshHeader(agent) {
    if (this.agentId === undefined) return;
    setText(this.title, agent?.label ?? this.agentId);
    const facts = agent === undefined ? [] : [agent.label === undefined ? null : agent.id, agent.kind === 'root' ? 'root' : agent.mode, agent.status];
    setText(this.meta, facts.filter(Boolean).join(' · '));
  }

  /** The agent's draft changed (deltas.js): shown at once if the agent is the open one. */
  draftChanged(id) {
    if (id === this.agentId) this.showDraft();
  }

  /** An event of the forest stream: the open agent's new entries join the transcript. */
  onEvent({ event, data }) {
    if ((event === 'approval-requested' || event === 'approval-decided') && data.agentId === this.agentId) {
      if (this.loading) this.reread = true;
      else if (this.atEnd) void this.loadPage({ quiet: true });
      return;
    }
    if (event !== 'entry' || data.agentId !== this.agentId) return;
    if (this.loading) this.buffered.push(data.entry);
    else this.follow(data.entry);
  }

  /**
   * @private
   * @param {{ quiet?: boolean }} [options] quiet: reading on for an approval, say nothing
   */
  async loadPage({ quiet = false } = {}) {
    const generation = this.generation;
    this.loading = true;
    this.more.hidden = true;
    if (!quiet) setText(this.state, 'Loading…');
    let page;
    try {
      page = (await getJson(`/v1/agents/${encodeURIComponent(this.agentId)}/session?after=${this.lastSeq}&limit=${PAGE}`)).body;
    } catch (error) {
      if (generation !== this.generation) return;
      this.loading = false;
      setText(this.state, `The session could not be read: ${error.message}`);
      this.more.hidden = false;
      return;
    }
    if (generation !== this.generation) return;
    for (const entry of page.entries) this.show(entry);
    this.loading = false;
    this.atEnd = page.nextAfter === null;
    for (const entry of this.buffered.splice(0)) this.follow(entry);
    this.settle();
    if (this.reread) {
      this.reread = false;
      void this.loadPage({ quiet: true });
    }
  }

  /** @private A live entry: shown if it is the next one, else the transcript is behind. */
  follow(entry) {
    if (entry.seq <= this.lastSeq) return;
    if (this.atEnd && entry.seq === this.lastSeq + 1) this.show(entry);
    else this.atEnd = false;
    this.settle();
  }

  /** @private */
  show(entry) {
    if (entry.seq <= this.lastSeq) return;
    this.entries.append(renderEntry(entry, this.context));
    this.lastSeq = entry.seq;
  }

  /** @private The open agent's draft, under a transcript that reaches the present; else none. */
  showDraft() {
    const draft = this.atEnd && this.agentId !== undefined ? this.hooks.draftOf(this.agentId) : undefined;
    if (draft === undefined) {
      this.bubble = undefined;
      replaceChildren(this.drafting);
    } else if (this.bubble?.key === draft.key) {
      this.bubble.update(draft);
    } else {
      this.bubble = new DraftBubble(draft);
      replaceChildren(this.drafting, this.bubble.element);
    }
  }

  /** @private */
  settle() {
    this.showDraft();
    this.more.hidden = this.atEnd;
    setText(this.state, this.lastSeq === 0 && this.atEnd ? 'No entries yet.' : this.atEnd ? '' : 'There is more.');
  }
}
