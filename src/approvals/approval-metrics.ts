/**
 * The approval metrics, on the app's registry: how many approvals wait now, read from the
 * store's index when scraped (the cluster's, with several instances on one database), and how
 * long each one waited until it was decided, expired or cancelled, by how it ended.
 */
import client from 'prom-client';
import type { Approval } from '../domain/approvals.js';
import type { Clock } from '../domain/ports.js';
import type { ApprovalReads } from '../sessions/approvals.js';

export function approvalMetrics(registry: client.Registry, reads: ApprovalReads, clock: Clock): (approval: Approval, waitedMs: number) => void {
  const registers = [registry];
  new client.Gauge({
    name: 'agentforest_approvals_pending',
    help: 'Approvals waiting for a decision, in every forest.',
    registers,
    async collect() {
      this.set(await reads.countPending(clock.iso()));
    },
  });
  const waited = new client.Histogram<'state'>({
    name: 'agentforest_approval_wait_seconds',
    help: 'How long an approval waited: from the request to its decision, expiry or cancellation (state).',
    labelNames: ['state'],
    buckets: [1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600],
    registers,
  });
  return (approval, waitedMs) => waited.observe({ state: approval.state }, Math.max(0, waitedMs) / 1000);
}
