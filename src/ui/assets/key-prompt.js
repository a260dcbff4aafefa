/**
 * The operator-key dialog: asked for when the API answers 401. Concurrent requests that need a
 * key share one open dialog and one answer. The form is a `method="dialog"` form, so submitting
 * it never puts the key in a URL.
 */
import { el } from './dom.js';

/** @type {Promise<string> | undefined} */
let asking;

/**
 * Resolves with the key the operator typed. `refused`: the last key sent was refused, say so.
 * @param {{ refused: boolean }} options
 * @returns {Promise<string>}
 */
export function askForKey({ refused }) {
  asking ??= show(refused).finally(() => {
    asking = undefined;
  });
  return asking;
}

function show(refused) {
  const input = el('input', { type: 'password', name: 'key', required: true, autocomplete: 'off', spellcheck: 'false', 'aria-label': 'Operator key' });
  const error = el('p', { class: 'key-error', role: 'alert', text: 'That key was refused. Try another.', hidden: !refused });
  const form = el(
    'form',
    { method: 'dialog', class: 'key-form' },
    el('h2', { text: 'Operator key' }),
    el('p', { text: 'This service needs an operator key (one of AGENTFOREST_API_KEYS). It is kept in this tab only.' }),
    input,
    error,
    el('div', { class: 'key-buttons' }, el('button', { type: 'submit', value: 'ok', text: 'Use key' })),
  );
  const dialog = el('dialog', { class: 'key-dialog', 'aria-label': 'Operator key' }, form);
  document.body.append(dialog);
  return new Promise((resolve) => {
    // Without a key nothing can be shown: Escape does not close the dialog.
    dialog.addEventListener('cancel', (event) => event.preventDefault());
    dialog.addEventListener('close', () => {
      const key = input.value.trim();
      dialog.remove();
      resolve(key);
    });
    dialog.showModal();
    input.focus();
  });
}
