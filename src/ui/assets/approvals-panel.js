/**
 * The forest page's approvals: the calls of this forest that wait for a person, oldest first,
 * above the tree (hidden while there are none). Read once at load
 * (GET /v1/approvals?state=pending&rootId=, every page) and kept current by the forest stream:
 * `approval-requested` adds one, `approval-decided` removes it, so a decision taken anywhere
 * (another page, the API) clears it from every open page.
 *
 * The first read and the stream race, and the stream first replays the forest's history, so
 * what is shown is the pending ones by the newest news of each: an approval that ended (its
 * decided event, or the answer to a decision posted from this page) is never shown again, and
 * one past its `expiresAt` has expired, whether or not its agent was there to say so.
 */
import { errorText, getAllPages } from './api.js';
import { ApprovalRow } from './approval-row.js';
import { el, setText } from './dom.js';

/** How often the ages are redrawn (and expired ones dropped) while any approval is shown. */
const TICK_MS = 1_000;

export class ApprovalsPanel {
  /**
   * @param {string} rootId
   * @param {{ onSelect: (agentId: string) => void }} hooks onSelect: read this agent's session
   */
  constructor(rootId, hooks) {
    this.rootId = rootId;
    this.hooks = hooks;
    this.count = el('span', { class: 'approvals-count' });
    this.failure = el('p', { class: 'load-error', role: 'alert', hidden: true });
    this.list = el('ol', { class: 'approval-list' });
    this.element = el(
      'section',
      { class: 'approvals', hidden: true, 'aria-label': 'Approvals waiting for a person' },
      el('div', { class: 'approvals-head' }, el('h2', { text: 'Waiting for a person' }), this.count),
      this.failure,
      this.list,
    );
    /** @type {Map<string, ApprovalRow>} shown, by approval id */
    this.rows = new Map();
    /** @type {Set<string>} ids of approvals known to have ended */
    this.ended = new Set();
    /** The service's clock less this one's, in ms (from the first read's Date header). */
    this.skew = 0;
    this.timer = undefined;
  }

  /** The forest's pending approvals now; a failure to read them is shown in the panel. */
  async load() {
    let page;
    try {
      page = await getAllPages(`/v1/approvals?state=pending&rootId=${encodeURIComponent(this.rootId)}`);
    } catch (error) {
      this.failure.hidden = false;
      setText(this.failure, `The approvals waiting here could not be read: ${errorText(error)}`);
      this.refresh();
      return;
    }
    if (page.serverTime > 0) this.skew = page.serverTime - Date.now();
    for (const approval of page.items) this.add(approval);
    this.refresh();
  }

  /** @param {{ event: string, data: any }} event one event of the forest stream */
  onEvent({ event, data }) {
    if (event === 'approval-requested') this.add(data);
    else if (event === 'approval-decided') this.end(data.id);
    else return;
    this.refresh();
  }

  /** @private */
  add(approval) {
    if (approval.rootId !== this.rootId || approval.state !== 'pending') return;
    if (this.ended.has(approval.id) || this.rows.has(approval.id) || this.expired(approval)) return;
    const row = new ApprovalRow(approval, {
      onEnded: (answer) => {
        this.end(answer.id);
        this.refresh();
      },
      onSelect: this.hooks.onSelect,
    });
    row.tick(this.now());
    this.rows.set(approval.id, row);
    // Oldest first, as the inbox lists them: before the first one shown that was asked later.
    const later = [...this.list.children].find((li) => older(approval, this.rows.get(li.dataset.approvalId)?.approval));
    this.list.insertBefore(row.li, later ?? null);
  }

  /** @private */
  end(id) {
    this.ended.add(id);
    this.rows.get(id)?.li.remove();
    this.rows.delete(id);
  }

  /** @private The count, the panel shown or hidden, and the ages ticking while any is shown. */
  refresh() {
    const n = this.rows.size;
    setText(this.count, n === 0 ? '' : String(n));
    this.element.hidden = n === 0 && this.failure.hidden;
    if (n > 0) this.timer ??= setTimeout(() => this.tick(), TICK_MS);
  }

  /** @private */
  tick() {
    this.timer = undefined;
    const now = this.now();
    for (const row of [...this.rows.values()]) {
      if (this.expired(row.approval)) this.end(row.approval.id);
      else row.tick(now);
    }
    this.refresh();
  }

  /** @private */
  expired(approval) {
    return Date.parse(approval.expiresAt) <= this.now();
  }

  /** @private The service's time now, as well as this page knows it. */
  now() {
    return Date.now() + this.skew;
  }
}

/** Whether `a` was asked before `b`: by requestedAt, then id. */
function older(a, b) {
  if (b === undefined) return false;
  return a.requestedAt < b.requestedAt || (a.requestedAt === b.requestedAt && a.id < b.id);
}
