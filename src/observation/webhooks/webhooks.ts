/**
 * Webhooks, composed: the subscriptions, the events that the log and the runtime queue into
 * the outbox, and the delivery worker. `system.ts` builds it and subscribes it to the service
 * events; `start` loads the subscriptions and starts delivering (the server calls it before
 * serving), `stop` stops sending.
 */
import type { Logger } from 'pino';
import type { Clock, IdSource } from '../../domain/ports.js';
import type { ForestPlacement } from '../../topology/topology.js';
import type { SessionLog } from '../../sessions/session-log.js';
import { DeliveryWorker, type DeliveryOptions, type DeliveryDeps } from './delivery-worker.js';
import type { WebhookReads } from '../../sessions/outbox.js';
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
      exact: deps.forests.exclusive,
    });
    this.events = new WebhookEvents({ log: deps.log, clock: deps.clock, interested: this.subscriptions.interested });
    deps.log.observe(this.events);
    this.worker = new DeliveryWorker(
      { reads: deps.reads, log: deps.log, clock: deps.clock, logger: deps.logger, forests: deps.forests, observe: deps.observe, send: deps.send },
      options,
    );
    // A committed event or retry is due at once: look now rather than at the next poll.
    deps.log.subscribe((batch) => {
      if ((batch.outbox?.length ?? 0) > 0 || batch.webhooks?.some((c) => c.op === 'retry') === true) this.worker.nudge();
    });
  }

  async start(): Promise<void> {
    await this.subscriptions.load();
    this.worker.start();
  }

  stop(): void {
    this.worker.stop();
  }
}
