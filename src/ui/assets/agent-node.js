/**
 * One agent in the tree: its row (status, name, kind and mode, inbox and staged counts, usage,
 * what it waits on, and "writing…" while its model's answer streams in), the reports it
 * received, and the list its children go in. Built once per agent; `update` rewrites only the
 * fields whose text changed.
 */
import { el, setText } from './dom.js';
import { clock, usageText } from './format.js';

/** Reports shown under an agent before "earlier reports" folds the rest away. */
const RECENT_REPORTS = 3;

export class AgentNode {
  /**
   * @param {import('./forest-model.js').AgentRecord} agent
   * @param {{
   *   onSelect: (id: string) => void,
   *   nameOf: (id: string) => string,
   *   draftOf: (id: string) => import('./deltas.js').Draft | undefined,
   * }} hooks
   */
  constructor(agent, hooks) {
    this.id = agent.id;
    this.hooks = hooks;
    this.toggle = el('button', { class: 'toggle', type: 'button', 'aria-expanded': 'true', title: 'Collapse or expand', onclick: () => this.setCollapsed(!this.collapsed) });
    this.status = el('span', { class: 'status' });
    this.name = el('button', { class: 'name', type: 'button', title: 'Read the session', onclick: () => hooks.onSelect(this.id) });
    this.idText = el('span', { class: 'agent-id' });
    this.kind = el('span', { class: 'kind' });
    this.counts = el('span', { class: 'counts' });
    this.usage = el('span', { class: 'usage' });
    this.paused = el('span', { class: 'paused' });
    this.tools = el('span', { class: 'tool-wait' });
    this.writing = el('span', { class: 'writing' });
    this.row = el('div', { class: 'row' }, this.toggle, this.status, this.name, this.idText, this.kind, this.counts, this.usage, this.paused, this.tools, this.writing);
    this.earlier = el('button', { class: 'earlier', type: 'button', hidden: true, onclick: () => this.li.classList.toggle('all-reports') });
    this.reports = el('ol', { class: 'reports' });
    this.childList = el('ul', { class: 'children' });
    this.li = el('li', { class: 'agent', dataset: { agentId: agent.id } }, this.row, this.earlier, this.reports, this.childList);
    this.collapsed = false;
    this.reportCount = 0;
    /** @type {Map<string, HTMLElement[]>} the "report from" buttons, by the child that sent them */
    this.senders = new Map();
    this.update(agent);
  }

  /** @param {import('./forest-model.js').AgentRecord} agent */
  update(agent) {
    this.li.dataset.status = agent.status;
    setText(this.status, agent.status);
    setText(this.name, agent.label ?? agent.id);
    setText(this.idText, agent.label === undefined ? '' : agent.id);
    setText(this.kind, kindText(agent));
    const counts = [agent.inbox > 0 ? `inbox ${agent.inbox}` : '', agent.staged > 0 ? `staged ${agent.staged}` : ''].filter(Boolean).join(' · ');
    setText(this.counts, counts);
    setText(this.usage, usageLine(agent));
    setText(this.paused, agent.pausedBy === undefined ? '' : `paused by ${this.hooks.nameOf(agent.pausedBy.agentId)}'s ${agent.pausedBy.budget} budget`);
    const waits = [...new Set(agent.toolCalls.values())];
    setText(this.tools, waits.length === 0 ? '' : `waiting on ${waits.join(', ')}`);
    setText(this.writing, writingText(this.hooks.draftOf(agent.id)));
    const children = agent.children.length;
    this.toggle.hidden = children === 0;
    setText(this.toggle, children === 0 ? '' : `${this.collapsed ? '▸' : '▾'} ${children}`);
  }

  setCollapsed(collapsed) {
    this.collapsed = collapsed;
    this.li.classList.toggle('collapsed', collapsed);
    this.toggle.setAttribute('aria-expanded', String(!collapsed));
    const text = this.toggle.textContent ?? '';
    setText(this.toggle, text.replace(/^[▸▾]/, collapsed ? '▸' : '▾'));
  }

  /** A child's name became known (or changed): its reports here say it. */
  renameSender(id) {
    for (const button of this.senders.get(id) ?? []) setText(button, this.hooks.nameOf(id));
  }

  /** @param {import('./forest-model.js').Report} report */
  addReport(report) {
    const from = el('button', { class: 'report-from link', type: 'button', text: this.hooks.nameOf(report.from), title: report.from, onclick: () => this.hooks.onSelect(report.from) });
    const senders = this.senders.get(report.from) ?? [];
    senders.push(from);
    this.senders.set(report.from, senders);
    const item = el(
      'li',
      { class: `report ${report.kind}`, dataset: { messageId: report.messageId, from: report.from } },
      el(
        'div',
        { class: 'report-head' },
        el('span', { class: 'report-kind', text: report.kind === 'subagent-notice' ? 'notice from' : 'report from' }),
        from,
        el('time', { datetime: report.at, text: clock(report.at) }),
      ),
      el('div', { class: 'report-text', text: report.text, title: 'Show all of it', onclick: (event) => event.currentTarget.classList.toggle('open') }),
    );
    this.reports.append(item);
    this.reportCount++;
    // The older ones stay in the document, folded away by the stylesheet until asked for.
    if (this.reportCount > RECENT_REPORTS) this.reports.children[this.reportCount - RECENT_REPORTS - 1].classList.add('older');
    this.earlier.hidden = this.reportCount <= RECENT_REPORTS;
    setText(this.earlier, `${this.reportCount - RECENT_REPORTS} earlier report${this.reportCount - RECENT_REPORTS === 1 ? '' : 's'}`);
  }
}

/** "writing…" while a draft is open; "writing a call to X…" once its latest part is a tool call. */
function writingText(draft) {
  if (draft === undefined) return '';
  const call = draft.calls.at(-1);
  return call === undefined || call.name === '' ? 'writing…' : `writing a call to ${call.name}…`;
}

function kindText(agent) {
  if (agent.kind === 'root') return 'root';
  return [agent.provider === 'remote' ? 'remote' : null, agent.mode].filter(Boolean).join(' ');
}

function usageLine(agent) {
  const self = usageText(agent.usage?.self);
  if (agent.children.length === 0) return self;
  const subtree = usageText(agent.usage?.subtree);
  return subtree === '' ? self : `${self === '' ? '' : `${self} · `}subtree ${subtree}`;
}
