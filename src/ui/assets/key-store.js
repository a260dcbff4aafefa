/**
 * The operator key, kept in this tab's sessionStorage (gone when the tab closes, never in the
 * URL, never sent anywhere but this origin's /v1 API).
 */
const STORAGE_KEY = 'agentforest.operatorKey';

/** Dispatched on window when a key is stored. */
export const KEY_CHANGED = 'agentforest-key';

export const keyStore = {
  /** @returns {string | undefined} */
  get() {
    return sessionStorage.getItem(STORAGE_KEY) ?? undefined;
  },
  /** @param {string} key */
  set(key) {
    sessionStorage.setItem(STORAGE_KEY, key);
    window.dispatchEvent(new Event(KEY_CHANGED));
  },
  clear() {
    sessionStorage.removeItem(STORAGE_KEY);
  },
};
