/**
 * The start page: the live roots (GET /v1/agents?kind=root, every page), each linking to
 * its forest, with its status, inbox, the approvals waiting in its forest (approval-counts.js)
 * and what its forest spent; below them the roots that are not running, to resume
 * (not-running.js). A resumed root moves from the second list to the first. Refresh reads all
 * of it again.
 */
import { errorText, getAllPages } from './api.js';
import { approvalsBadge, pendingByForest } from './approval-counts.js';
import { forestHref, setCrumbs, showMessage } from './chrome.js';
import { el, replaceChildren } from './dom.js';
import { clock, usageText } from './format.js';
import { notRunningSection } from './not-running.js';

/** @param {HTMLElement} main */
export async function showStartPage(main) {
  setCrumbs([{ text: 'Forests' }]);
  const refresh = el('button', { type: 'button', text: 'Refresh', onclick: () => void loadAll() });
  const body = el('div', { class: 'roots-body' }, el('p', { class: 'placeholder', text: 'Loading…' }));
  const notRunning = notRunningSection({ onResumed: () => loadAll() });
  replaceChildren(
    main,
    el('section', { class: 'start' }, el('div', { class: 'page-head' }, el('h1', { text: 'Live forests' }), refresh), body, notRunning.element),
  );

  /** The live roots, and the approvals waiting per forest (a failure to read those is shown, the roots still are). */
  const load = async () => {
    const approvals = pendingByForest().catch((error) => error);
    let roots;
    try {
      roots = (await getAllPages('/v1/agents?kind=root')).items;
    } catch (error) {
      showMessage(main, 'The list of agents could not be read', error.message);
      return undefined;
    }
    const counts = await approvals;
    const failed = counts instanceof Map ? null : el('p', { class: 'load-error', role: 'alert', text: `The approvals waiting could not be read: ${errorText(counts)}` });
    const pending = counts instanceof Map ? counts : new Map();
    replaceChildren(body, failed, roots.length === 0 ? el('p', { class: 'placeholder', text: 'No live roots. Create one with POST /v1/agents, or resume one below.' }) : rootTable(roots, pending));
    return pending;
  };
  // The live list first: a key asked for there serves the second list too.
  const loadAll = async () => {
    const pending = await load();
    if (pending !== undefined) await notRunning.load(pending);
  };
  await loadAll();
}

/** @param {Map<string, number>} pending approvals waiting, by forest */
function rootTable(roots, pending) {
  const rows = roots.map((root) =>
    el(
      'tr',
      { class: 'root', dataset: { agentId: root.id, status: root.status } },
      el('td', {}, el('a', { href: forestHref(root.id), text: root.label ?? root.id }), approvalsBadge(pending.get(root.id))),
      el('td', {}, el('span', { class: 'status', text: root.status })),
      el('td', { text: root.inbox.queued > 0 ? String(root.inbox.queued) : '' }),
      el('td', { text: usageText(root.usage.subtree) }),
      el('td', {}, el('time', { datetime: root.createdAt, text: clock(root.createdAt) })),
    ),
  );
  const head = el('tr', {}, ...['Root', 'Status', 'Inbox', 'Forest spent', 'Created'].map((text) => el('th', { text })));
  return el('table', { class: 'roots' }, el('thead', {}, head), el('tbody', {}, ...rows));
}
