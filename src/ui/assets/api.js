/**
 * Calls to the /v1 API with the operator key as `Authorization: Bearer <key>`. A 401 asks for
 * a key (once for every request waiting on it) and retries with it; a key the API refuses is
 * forgotten. GETs are retried when the network fails or the service asks to come back later
 * (429, 503), so a dropped connection costs no data; a POST is sent once, and its refusal shown.
 */
import { askForKey } from './key-prompt.js';
import { keyStore } from './key-store.js';

const RETRIES = 5;
const RETRY_BASE_MS = 300;

export class ApiError extends Error {
  /** @param {number} status @param {{ code?: string, message?: string } | null} body */
  constructor(status, body) {
    super(body?.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.code;
  }
}

/**
 * `fetch` of a /v1 path with the key; asks for a key and retries while the answer is 401.
 * The response of any other status is returned as it is.
 * @param {string} path
 * @param {RequestInit & { headers?: Record<string, string> }} [init]
 * @returns {Promise<Response>}
 */
export async function authorizedFetch(path, init = {}) {
  for (;;) {
    const key = keyStore.get();
    const headers = { ...init.headers };
    if (key !== undefined) headers.authorization = `Bearer ${key}`;
    const response = await fetch(path, { ...init, headers });
    if (response.status !== 401) return response;
    await response.body?.cancel();
    // Another request may have been given a new key meanwhile: then just retry with it.
    if (keyStore.get() !== key) continue;
    if (key !== undefined) keyStore.clear();
    const typed = await askForKey({ refused: key !== undefined });
    if (typed !== '') keyStore.set(typed);
  }
}

/**
 * GET a /v1 path as JSON: `{ body, serverTime }` (serverTime from the Date header, in ms).
 * Throws ApiError for an error status other than 401, 429 and 503.
 * @param {string} path
 */
export async function getJson(path) {
  for (let attempt = 0; ; attempt++) {
    let response;
    try {
      response = await authorizedFetch(path, { headers: { accept: 'application/json' }, cache: 'no-store' });
    } catch (error) {
      if (attempt >= RETRIES) throw error;
      await sleep(RETRY_BASE_MS * 2 ** attempt);
      continue;
    }
    if ((response.status === 429 || response.status === 503) && attempt < RETRIES) {
      await response.body?.cancel();
      const after = Number(response.headers.get('retry-after'));
      await sleep(Number.isFinite(after) && after > 0 ? after * 1000 : RETRY_BASE_MS * 2 ** attempt);
      continue;
    }
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, body);
    const date = Date.parse(response.headers.get('date') ?? '');
    return { body, serverTime: Number.isNaN(date) ? 0 : date };
  }
}

/**
 * POST a JSON body to a /v1 path once (an operator's action is never repeated for them): the
 * parsed answer, or ApiError with the service's code and message.
 * @param {string} path
 * @param {unknown} [body]
 */
export async function postJson(path, body = {}) {
  const response = await authorizedFetch(path, {
    method: 'POST',
    headers: { accept: 'application/json', 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, answer);
  return answer;
}

/**
 * Every item of a paged list (`items`, `nextCursor`), page by page: `{ items, serverTime }`
 * with the server time of the first page.
 */
export async function getAllPages(path, { limit = 1000 } = {}) {
  const items = [];
  let serverTime;
  let cursor;
  do {
    const separator = path.includes('?') ? '&' : '?';
    const page = await getJson(`${path}${separator}limit=${limit}${cursor === undefined ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
    serverTime ??= page.serverTime;
    items.push(...page.body.items);
    cursor = page.body.nextCursor ?? undefined;
  } while (cursor !== undefined);
  return { items, serverTime };
}

/** An error for a person to read: "the service's message (CODE)", or the network's. */
export function errorText(error) {
  return error?.code === undefined ? String(error?.message ?? error) : `${error.message} (${error.code})`;
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
