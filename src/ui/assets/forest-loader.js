/**
 * Where the forest's views come from: the first load (the root's view, then each agent's
 * children, GET /v1/agents?parentId=, paged, breadth first), the view of an agent the stream
 * names before the page knows it, and a refetch of the figures an agent's spending changed
 * (at most once per REFRESH_MS per agent). Every view goes into the model with the stamp of
 * its request (see forest-model.js).
 */
import { ApiError, getAllPages, getJson } from './api.js';
import { createTaskPool } from './task-pool.js';

/** Requests in flight at once: the browser's six connections per host, less the stream's. */
const CONCURRENCY = 4;
const REFRESH_MS = 2_000;

/**
 * @param {{ model: import('./forest-model.js').ForestModel }} deps
 */
export function createForestLoader({ model }) {
  const pool = createTaskPool(CONCURRENCY);
  /** Views queued or in flight; `again`: wanted again while in flight. */
  const fetching = new Set();
  const again = new Set();
  const stale = new Set();
  let refreshTimer;

  const fetchView = (id) => {
    if (fetching.has(id)) {
      again.add(id);
      return;
    }
    fetching.add(id);
    pool.add(async () => {
      const askedAt = model.now();
      try {
        const { body, serverTime } = await getJson(`/v1/agents/${encodeURIComponent(id)}`);
        model.upsertView(body, { askedAt, serverTime });
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) model.forget(id);
        else throw error;
      } finally {
        fetching.delete(id);
        if (again.delete(id)) fetchView(id);
      }
    });
  };

  const listChildren = (parentId) => {
    pool.add(async () => {
      const askedAt = model.now();
      const { items, serverTime } = await getAllPages(`/v1/agents?parentId=${encodeURIComponent(parentId)}`);
      for (const view of items) {
        model.upsertView(view, { askedAt, serverTime });
        listChildren(view.id);
      }
    });
  };

  return {
    /**
     * The root's view and every descendant's; rejects with the root's ApiError (404: not live).
     * @param {string} rootId
     */
    async loadTree(rootId) {
      const askedAt = model.now();
      const { body, serverTime } = await getJson(`/v1/agents/${encodeURIComponent(rootId)}`);
      model.upsertView(body, { askedAt, serverTime });
      listChildren(rootId);
      await pool.idle();
    },
    /** The view of an agent the stream named first. */
    want: fetchView,
    /** The agent's figures changed: refetch its view soon, once however often this is called. */
    stale(id) {
      stale.add(id);
      refreshTimer ??= setTimeout(() => {
        refreshTimer = undefined;
        for (const each of stale) fetchView(each);
        stale.clear();
      }, REFRESH_MS);
    },
  };
}
