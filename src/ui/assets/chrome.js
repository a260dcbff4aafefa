/**
 * The page's frame around the content: the breadcrumbs and the "forget key" action in the
 * header, and the full-page messages (loading, errors).
 */
import { el, replaceChildren } from './dom.js';
import { KEY_CHANGED, keyStore } from './key-store.js';

/** @param {{ text: string, href?: string }[]} crumbs */
export function setCrumbs(crumbs) {
  const nav = document.getElementById('crumbs');
  const items = crumbs.flatMap((c, i) => [i === 0 ? null : el('span', { class: 'sep', text: '/' }), c.href === undefined ? el('span', { text: c.text }) : el('a', { href: c.href, text: c.text })]);
  replaceChildren(nav, ...items);
  document.title = ['agentforest', ...crumbs.slice(1).map((c) => c.text)].join(' · ');
}

/** "Forget key" in the header, while this tab holds a key. */
export function showKeyAction() {
  const actions = document.getElementById('top-actions');
  const render = () => replaceChildren(actions, keyStore.get() === undefined ? null : forget);
  const forget = el('button', {
    type: 'button',
    class: 'link',
    text: 'Forget key',
    title: 'Remove the operator key from this tab',
    onclick: () => {
      keyStore.clear();
      location.reload();
    },
  });
  render();
  window.addEventListener(KEY_CHANGED, render);
}

/** A message in place of the page's content. */
export function showMessage(main, title, detail) {
  replaceChildren(main, el('section', { class: 'page-message' }, el('h1', { text: title }), detail === undefined ? null : el('p', { text: detail }), el('p', {}, el('a', { href: '/ui', text: 'All forests' }))));
}

/** The link to a forest's page. */
export function forestHref(rootId) {
  return `/ui/forests/${encodeURIComponent(rootId)}`;
}
