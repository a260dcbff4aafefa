/**
 * The forest as a tree of AgentNodes keyed by agent id. Changes are noted as they arrive and
 * applied once per animation frame: new agents are inserted in their place among their
 * siblings, changed ones update their own fields, reports are appended; nothing is rebuilt.
 */
import { AgentNode } from './agent-node.js';

export class TreeView {
  /**
   * @param {HTMLElement} list the <ul> the root goes in
   * @param {import('./forest-model.js').ForestModel} model
   * @param {{
   *   onSelect: (id: string) => void,
   *   onFlushed: () => void,
   *   draftOf: (id: string) => import('./deltas.js').Draft | undefined,
   * }} hooks
   */
  constructor(list, model, hooks) {
    this.list = list;
    this.model = model;
    this.hooks = hooks;
    /** @type {Map<string, AgentNode>} */
    this.nodes = new Map();
    this.added = new Set();
    this.changed = new Set();
    /** @type {{ id: string, report: import('./forest-model.js').Report }[]} */
    this.reports = [];
    this.frame = 0;
    this.selected = undefined;
    this.nameOf = (id) => model.agents.get(id)?.label ?? id;
  }

  /** @param {import('./forest-model.js').ChangeKind} kind */
  note(kind, id, report) {
    if (kind === 'added') this.added.add(id);
    else if (kind === 'changed') this.changed.add(id);
    else this.reports.push({ id, report });
    this.frame ||= requestAnimationFrame(() => this.flush());
  }

  select(id) {
    this.nodes.get(this.selected)?.li.classList.remove('selected');
    this.selected = id;
    this.nodes.get(id)?.li.classList.add('selected');
  }

  setAllCollapsed(collapsed) {
    for (const node of this.nodes.values()) if (node.id !== this.model.rootId) node.setCollapsed(collapsed);
  }

  /** @private */
  flush() {
    this.frame = 0;
    const added = [...this.added].map((id) => this.model.agents.get(id)).filter((a) => a !== undefined);
    this.added.clear();
    added.sort((a, b) => a.depth - b.depth);
    for (const agent of added) {
      this.insert(agent);
      if (agent.parentId !== null) this.nodes.get(agent.parentId)?.renameSender(agent.id);
    }
    for (const id of this.changed) {
      const agent = this.model.agents.get(id);
      if (agent !== undefined) this.nodes.get(id)?.update(agent);
    }
    this.changed.clear();
    for (const { id, report } of this.reports.splice(0)) this.nodes.get(id)?.addReport(report);
    this.hooks.onFlushed();
  }

  /** @private */
  insert(agent) {
    if (this.nodes.has(agent.id)) return;
    const node = new AgentNode(agent, { onSelect: this.hooks.onSelect, nameOf: this.nameOf, draftOf: this.hooks.draftOf });
    this.nodes.set(agent.id, node);
    if (agent.id === this.selected) node.li.classList.add('selected');
    const parent = agent.parentId === null ? undefined : this.model.agents.get(agent.parentId);
    const parentNode = parent === undefined ? undefined : this.nodes.get(parent.id);
    if (agent.id === this.model.rootId || parent === undefined || parentNode === undefined) {
      this.list.append(node.li);
      return;
    }
    // Before the first later sibling already shown, so siblings stay in creation order.
    const siblings = parent.children;
    let before = null;
    for (let i = siblings.indexOf(agent.id) + 1; i < siblings.length && before === null; i++) {
      before = this.nodes.get(siblings[i])?.li ?? null;
    }
    parentNode.childList.insertBefore(node.li, before);
  }
}
