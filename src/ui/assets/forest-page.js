/**
 * One forest's page: the tree (tree-view.js) fed by the model (forest-model.js), which the
 * first load and the forest's event stream fill, the session reader beside it, what driven
 * agents are writing (deltas.js, from the same stream's live deltas), and above them
 * the approvals waiting for a person (approvals-panel.js). This file only wires them together
 * and shows the toolbar: agents by status and the stream's state.
 */
import { ApprovalsPanel } from './approvals-panel.js';
import { setCrumbs, showMessage } from './chrome.js';
import { Drafts } from './deltas.js';
import { el, replaceChildren, setText } from './dom.js';
import { followEvents } from './event-stream.js';
import { createForestLoader } from './forest-loader.js';
import { ForestModel } from './forest-model.js';
import { SessionPanel } from './session-panel.js';
import { TreeView } from './tree-view.js';

const STREAM_STATES = { connecting: 'connecting…', live: 'live', reconnecting: 'reconnecting…', failed: 'stream ended' };

/**
 * @param {HTMLElement} main
 * @param {string} rootId
 */
export function showForestPage(main, rootId) {
  setCrumbs([{ text: 'Forests', href: '/ui' }, { text: rootId }]);
  const summary = el('span', { class: 'summary' });
  const streamState = el('span', { class: 'stream-state', dataset: { state: 'connecting' }, text: STREAM_STATES.connecting });
  const toolbar = el(
    'div',
    { class: 'toolbar' },
    summary,
    streamState,
    el('span', { class: 'spacer' }),
    el('button', { type: 'button', text: 'Collapse all', onclick: () => tree.setAllCollapsed(true) }),
    el('button', { type: 'button', text: 'Expand all', onclick: () => tree.setAllCollapsed(false) }),
  );
  const list = el('ul', { class: 'tree', 'aria-label': 'Agents of the forest' });
  const select = (id) => {
    tree.select(id);
    panel.open(id, model.agents.get(id));
  };
  const drafts = new Drafts();
  const draftOf = (id) => drafts.get(id);
  const panel = new SessionPanel({ nameOf: (id) => model.agents.get(id)?.label ?? id, onSelect: select, onClose: () => tree.select(undefined), draftOf });
  const approvals = new ApprovalsPanel(rootId, { onSelect: select });
  replaceChildren(main, approvals.element, el('div', { class: 'forest-layout' }, el('section', { class: 'forest' }, toolbar, list), panel.element));

  const model = new ForestModel(rootId, {
    onChange: (kind, id, report) => tree.note(kind, id, report),
    onUnknown: (id) => loader.want(id),
    onStale: (id) => loader.stale(id),
  });
  const loader = createForestLoader({ model });
  const tree = new TreeView(list, model, {
    onSelect: select,
    draftOf,
    onFlushed: () => {
      const counts = Object.entries(model.counts()).map(([status, n]) => `${n} ${status}`).join(' · ');
      setText(summary, `${model.agents.size} agent${model.agents.size === 1 ? '' : 's'}${counts === '' ? '' : ` — ${counts}`}`);
      panel.refreshHeader(model.agents.get(panel.agentId ?? ''));
    },
  });

  const stream = followEvents({
    path: `/v1/agents/${encodeURIComponent(rootId)}/events?forest=true&deltas=true`,
    onEvent: (event) => {
      // A delta grows a draft; an entry may end one (the panel shows the recorded message instead).
      const drafting = drafts.apply(event);
      if (drafting !== undefined) {
        tree.note('changed', drafting);
        panel.draftChanged(drafting);
      }
      model.apply(event);
      panel.onEvent(event);
      approvals.onEvent(event);
    },
    onState: (state) => {
      streamState.dataset.state = state;
      setText(streamState, STREAM_STATES[state]);
    },
  });

  void approvals.load();
  loader.loadTree(rootId).then(
    () => model.releaseHold(),
    (error) => {
      stream.stop();
      showMessage(main, error.status === 404 ? `No live root "${rootId}"` : 'The forest could not be read', error.status === 404 ? 'It was disposed, or it is not resumed after a restart.' : error.message);
      // A forest no instance runs may still wait on a person: its approvals can be decided here,
      // and its agents act on them when resumed.
      if (error.status === 404) main.prepend(approvals.element);
    },
  );
}
