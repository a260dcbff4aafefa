/**
 * The webhook metrics, on the app's registry: attempts by outcome and their duration (fed by
 * the delivery worker), and what the outbox holds, read from the store when scraped: pending
 * deliveries and the lag, the age of the oldest one.
 */
import client from 'prom-client';
import type { Clock } from '../../domain/ports.js';
import type { AttemptOutcome } from './delivery-worker.js';
import type { WebhookReads } from '../../sessions/outbox.js';

export function webhookMetrics(registry: client.Registry, reads: WebhookReads, clock: Clock): (outcome: AttemptOutcome, seconds: number) => void {
  const registers = [registry];
  const attempts = new client.Counter<'outcome'>({
    name: 'agentforest_webhook_deliveries_total',
    help: 'Webhook delivery attempts by outcome: delivered (2xx), retrying (5xx, 429 or a network error, tried again later), failed (given up).',
    labelNames: ['outcome'],
    registers,
  });
  const duration = new client.Histogram({
    name: 'agentforest_webhook_attempt_seconds',
    help: 'Webhook delivery attempts: from sending to the answer (or the error).',
    buckets: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  // One read of the store per scrape, shared by both gauges.
  let backlog: ReturnType<WebhookReads['backlog']> | undefined;
  const read = (): ReturnType<WebhookReads['backlog']> => {
    backlog ??= reads.backlog().finally(() => setImmediate(() => (backlog = undefined)));
    return backlog;
  };
  new client.Gauge({
    name: 'agentforest_webhook_pending_deliveries',
    help: 'Webhook deliveries in the outbox not yet delivered or given up.',
    registers,
    async collect() {
      this.set((await read()).pending);
    },
  });
  new client.Gauge({
    name: 'agentforest_webhook_lag_seconds',
    help: 'Age of the oldest pending webhook delivery (0 when none is pending).',
    registers,
    async collect() {
      const oldest = (await read()).oldestPendingAt;
      this.set(oldest === null ? 0 : Math.max(0, (clock.now() - oldest) / 1000));
    },
  });
  return (outcome, seconds) => {
    attempts.inc({ outcome });
    duration.observe(seconds);
  };
}
