/**
 * The start page's "Not running" list: the durable roots that are not live, the ones there are
 * to resume after a restart (GET /v1/agents?live=false, a page at a time, "Show more" for the
 * next). Each has a Resume button that re-opens it with the operator key
 * (POST /v1/agents/{id}/resume); a refusal is shown on the root's row, with the service's code.
 * A root whose forest has approvals waiting says how many (they can be decided while it is not
 * running; its agents act on the decision once resumed).
 */
import { errorText, getJson, postJson } from './api.js';
import { approvalsBadge } from './approval-counts.js';
import { el, replaceChildren } from './dom.js';
import { clock } from './format.js';

const PAGE_SIZE = 50;

/**
 * The section, and `load(pending)` to (re)read its first page, with the approvals waiting by
 * forest. `onResumed(id)` is called once a root is live again.
 * @param {{ onResumed: (id: string) => void | Promise<void> }} options
 */
export function notRunningSection({ onResumed }) {
  const body = el('div', { class: 'not-running-body' }, el('p', { class: 'placeholder', text: 'Loading…' }));
  const element = el('section', { class: 'not-running' }, el('div', { class: 'page-head' }, el('h2', { text: 'Not running' })), body);

  /** @type {Map<string, number>} */
  let pending = new Map();
  const rowsOf = (roots) => roots.map((root) => rootRow(root, pending.get(root.id), onResumed));

  /** @param {Map<string, number>} [waiting] approvals waiting, by forest */
  const load = async (waiting = new Map()) => {
    pending = waiting;
    let page;
    try {
      page = (await getJson(`/v1/agents?live=false&limit=${PAGE_SIZE}`)).body;
    } catch (error) {
      replaceChildren(body, el('p', { class: 'load-error', role: 'alert', text: `The roots that are not running could not be read: ${errorText(error)}` }));
      return;
    }
    if (page.items.length === 0) {
      replaceChildren(body, el('p', { class: 'placeholder', text: 'Every durable root is live: nothing to resume.' }));
      return;
    }
    const tbody = el('tbody', {}, ...rowsOf(page.items));
    const head = el('tr', {}, ...['Root', 'Last written', 'Created', 'Turn', ''].map((text) => el('th', { text })));
    const more = el('button', { type: 'button', class: 'more', text: 'Show more' });
    let cursor = page.nextCursor;
    more.hidden = cursor === null;
    more.addEventListener('click', async () => {
      more.disabled = true;
      try {
        const next = (await getJson(`/v1/agents?live=false&limit=${PAGE_SIZE}&cursor=${encodeURIComponent(cursor)}`)).body;
        tbody.append(...rowsOf(next.items));
        cursor = next.nextCursor;
        more.hidden = cursor === null;
      } catch (error) {
        more.title = errorText(error);
      } finally {
        more.disabled = false;
      }
    });
    replaceChildren(body, el('table', { class: 'roots stopped' }, el('thead', {}, head), tbody), more);
  };

  return { element, load };
}

function rootRow(root, waiting, onResumed) {
  const error = el('span', { class: 'resume-error', role: 'alert' });
  const resume = el('button', { type: 'button', class: 'resume', text: 'Resume' });
  resume.addEventListener('click', async () => {
    resume.disabled = true;
    resume.textContent = 'Resuming…';
    error.textContent = '';
    try {
      await postJson(`/v1/agents/${encodeURIComponent(root.id)}/resume`);
    } catch (failure) {
      error.textContent = `Not resumed: ${errorText(failure)}`;
      resume.disabled = false;
      resume.textContent = 'Resume';
      return;
    }
    await onResumed(root.id);
  });
  return el(
    'tr',
    { class: 'stopped-root', dataset: { agentId: root.id, openTurn: String(root.openTurn) } },
    el('td', {}, el('span', { class: 'root-name', text: root.label ?? root.id }), approvalsBadge(waiting)),
    el('td', {}, el('time', { datetime: root.lastEntryAt, text: clock(root.lastEntryAt) })),
    el('td', {}, el('time', { datetime: root.createdAt, text: clock(root.createdAt) })),
    el('td', { class: 'turn', text: root.openTurn ? 'left open' : '' }),
    el('td', { class: 'actions' }, resume, error),
  );
}
