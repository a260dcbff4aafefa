/**
 * Building DOM without parsing markup: every string from the API becomes a text node or an
 * attribute value, never HTML, so nothing the service returns can inject markup or script.
 */

/**
 * `el('li', { class: 'agent', dataset: { agentId }, onclick }, 'text', child)`. Props: `class`,
 * `text` (textContent), `dataset`, `on<event>` listeners; anything else is an attribute
 * (`true` sets it empty; `false`, null and undefined leave it out).
 * @param {string} tag
 * @param {Record<string, unknown>} [props]
 * @param {...(Node | string | number | null | undefined | false)} children
 * @returns {HTMLElement}
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = String(value);
    else if (key === 'text') node.textContent = String(value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), /** @type {EventListener} */ (value));
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, ...children);
  return node;
}

/** Appends children, strings as text nodes; null, undefined and false are skipped. */
export function append(parent, ...children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(typeof child === 'string' || typeof child === 'number' ? document.createTextNode(String(child)) : child);
  }
  return parent;
}

/** Replaces every child of `parent`. */
export function replaceChildren(parent, ...children) {
  parent.replaceChildren();
  return append(parent, ...children);
}

/** Sets textContent only when it differs, so an unchanged field costs no layout. */
export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}
