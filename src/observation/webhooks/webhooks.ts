/**
 * Webhooks, composed: the subscriptions, the events that the log and the runtime queue into
 * the outbox, and the delivery worker. `system.ts` builds it and lists its `observer` among the
 * runtime's observers; `start` loads the subscriptions and starts delivering (the server calls it before
 * serving), `stop` stops sending.
 */
import type { Logger } from 'pino';
import type { Clock, IdSource } from '../../domain/ports.js';
import type { ForestPlacement } from '../../topology/topology.js';
import type { SessionLog } from '../../sessions/session-log.js';
import { DeliveryWorker, type DeliveryOptions, type DeliveryDeps } from './delivery-worker.js';
import type { WebhookReads } from '../../sessions/outbox.js';
import type { RuntimeObserver } from '../runtime-observer.js';
import { WebhookSubscriptions } from './subscriptions.js';
import { WebhookEvents } from './webhook-events.js';

export interface WebhookDeps {
  log: SessionLog;
  reads: WebhookReads;
  clock: Clock;
  ids: IdSource;
  logger?: Logger | undefined;
  forests: ForestPlacement;
  observe?: DeliveryDeps['observe'];
  send?: DeliveryDeps['send'];
}

export class Webhooks {
  readonly subscriptions: WebhookSubscriptions;
  readonly events: WebhookEvents;
  readonly worker: DeliveryWorker;

  constructor(deps: WebhookDeps, options: DeliveryOptions) {
    this.subscriptions = new WebhookSubscriptions({
      log: deps.log,
      reads: deps.reads,
      clock: deps.clock,
      ids: deps.ids,
      allowPrivate: options.allowPrivate,
      tenantPrivateAddresses: options.tenantPrivateAddresses,
      exact: deps.forests.exclusive,
    });
    this.events = new WebhookEvents({ log: deps.log, clock: deps.clock, interested: this.subscriptions.interested });
    this.worker = new DeliveryWorker(
      { reads: deps.reads, log: deps.log, clock: deps.clock, logger: deps.logger, forests: deps.forests, observe: deps.observe, send: deps.send },
      options,
    );
  }

  /** What webhooks hear of the runtime: the events they deliver, and commits that make a delivery due. */
  readonly observer: RuntimeObserver = {
    entryQueued: (item) => this.events.entryQueued(item),
    report: (_delivery, outcome, messageId, child) => {
      if (outcome === 'accepted' && messageId !== undefined && child !== undefined) this.events.reportDelivered(child, messageId);
    },
    budgetExhausted: (agent, pausedBy) => this.events.paused(agent, pausedBy),
    toolCallRequested: (agent, stepId, call) => this.events.toolCallRequested(agent, stepId, call),
    stepLease: (event, agent, stepId, attempt) => {
      if (event === 'expired') this.events.leaseExpired(agent, stepId, attempt);
    },
    // A committed event or retry is due at once: look now rather than at the next poll.
    committed: (batch) => {
      if ((batch.outbox?.length ?? 0) > 0 || batch.webhooks?.some((c) => c.op === 'retry') === true) this.worker.nudge();
    },
  };

  async start(): Promise<void> {
    await this.subscriptions.load();
    this.worker.start();
  }

  stop(): void {
    this.worker.stop();
  }
}
