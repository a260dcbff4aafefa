/**
 * How many approvals wait for a person in each forest, for the start page: the whole inbox's
 * pending ones (GET /v1/approvals?state=pending, every page) counted by `rootId`, and the badge
 * shown beside a forest that has any.
 */
import { getAllPages } from './api.js';
import { el } from './dom.js';

/** @returns {Promise<Map<string, number>>} rootId → pending approvals, only forests with some */
export async function pendingByForest() {
  const { items } = await getAllPages('/v1/approvals?state=pending');
  const counts = new Map();
  for (const approval of items) counts.set(approval.rootId, (counts.get(approval.rootId) ?? 0) + 1);
  return counts;
}

/**
 * The badge for a forest with `count` approvals waiting; null when none.
 * @param {number | undefined} count
 */
export function approvalsBadge(count) {
  if (count === undefined || count === 0) return null;
  const text = `${count} approval${count === 1 ? '' : 's'} waiting`;
  return el('span', { class: 'approvals-badge', dataset: { count: String(count) }, title: `${text} for a person`, text });
}
