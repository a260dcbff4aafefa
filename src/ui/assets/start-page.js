/**
 * The start page: the live roots (GET /v1/agents?kind=root, every page), each linking to
 * its forest, with its status, inbox and what its forest spent; below them the roots that are
 * not running, to resume (not-running.js). A resumed root moves from the second list to the first.
 */
import { getAllPages } from './api.js';
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

  const load = async () => {
    let roots;
    try {
      roots = (await getAllPages('/v1/agents?kind=root')).items;
    } catch (error) {
      showMessage(main, 'The list of agents could not be read', error.message);
      return false;
    }
    replaceChildren(body, roots.length === 0 ? el('p', { class: 'placeholder', text: 'No live roots. Create one with POST /v1/agents, or resume one below.' }) : rootTable(roots));
    return true;
  };
  // The live list first: a key asked for there serves the second list too.
  const loadAll = async () => {
    if (await load()) await notRunning.load();
  };
  await loadAll();
}

function rootTable(roots) {
  const rows = roots.map((root) =>
    el(
      'tr',
      { class: 'root', dataset: { agentId: root.id, status: root.status } },
      el('td', {}, el('a', { href: forestHref(root.id), text: root.label ?? root.id })),
      el('td', {}, el('span', { class: 'status', text: root.status })),
      el('td', { text: root.inbox.queued > 0 ? String(root.inbox.queued) : '' }),
      el('td', { text: usageText(root.usage.subtree) }),
      el('td', {}, el('time', { datetime: root.createdAt, text: clock(root.createdAt) })),
    ),
  );
  const head = el('tr', {}, ...['Root', 'Status', 'Inbox', 'Forest spent', 'Created'].map((text) => el('th', { text })));
  return el('table', { class: 'roots' }, el('thead', {}, head), el('tbody', {}, ...rows));
}
