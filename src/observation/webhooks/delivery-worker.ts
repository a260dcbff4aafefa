/**
 * The delivery worker: sends the outbox's due deliveries, signed, and records each attempt.
 *
 * Invariants:
 * - a stream (one subscription's deliveries of one forest) has at most one delivery in flight,
 *   and it is the stream's oldest pending one: deliveries reach a receiver in log order, a
 *   later one only after the earlier was delivered or given up;
 * - an attempt's outcome is committed through the session log, fenced with its forest. A retry
 *   waits for its mark; a settled delivery (delivered or given up) lets its stream go on at once,
 *   and no look at the outbox sends it again while its mark commits. One whose mark did not
 *   commit (a crash, a store failure) is sent again later: at least once, under the same id;
 * - at most `perEndpoint` requests are in flight to one origin and `concurrency` in all, so a
 *   slow receiver holds only its own slots;
 * - 5xx, 429 and network errors are retried with exponential backoff and jitter (at least what
 *   `Retry-After` asks) until `maxAgeMs` after the delivery's window opened; then, or at once
 *   for any other answer that is not 2xx, the delivery failed;
 * - a tenant's subscription is sent through the address guard whatever `allowPrivate` says
 *   (only an admin may point the service at its own network): `allowPrivate` is an admin's.
 *
 * With forest leases, an instance delivers the forests it holds and, taking their lease first,
 * those nobody holds (a forest whose agents all left keeps undelivered events): the store leaves
 * out forests another instance holds, and a takeover makes their rows this instance's.
 */
import type { Logger } from 'pino';
import type { Clock } from '../../domain/ports.js';
import type { ForestPlacement } from '../../topology/topology.js';
import type { SessionLog } from '../../sessions/session-log.js';
import { retryDelayMs, parseRetryAfter, type BackoffOptions, DEFAULT_BACKOFF } from './backoff.js';
import { streamKey, type DueDelivery, type WebhookChange, type WebhookReads } from '../../sessions/outbox.js';
import { sendWebhook, type SendOutcome, type WebhookRequest } from './sender.js';
import { parseSecret, signatureHeaders } from './signing.js';

export interface DeliveryOptions {
  /** How often the outbox is looked at when nothing nudged the worker. */
  pollMs: number;
  timeoutMs: number;
  /** How long a delivery is retried, from when it was queued (or retried by hand). */
  maxAgeMs: number;
  perEndpoint: number;
  concurrency: number;
  maxResponseBytes: number;
  /** An admin's subscription may be at a loopback, private or link-local address (AGENTFOREST_WEBHOOK_ALLOW_PRIVATE). */
  allowPrivate: boolean;
  /** A tenant's subscription may be too (tests only: no environment variable sets it). */
  tenantPrivateAddresses: boolean;
  backoff: BackoffOptions;
  /** How long delivered rows are kept (for the deliveries listing). */
  retentionMs: number;
}

export const DEFAULT_DELIVERY: DeliveryOptions = {
  pollMs: 1000,
  timeoutMs: 10_000,
  maxAgeMs: 24 * 3_600_000,
  perEndpoint: 4,
  concurrency: 64,
  maxResponseBytes: 4096,
  allowPrivate: false,
  tenantPrivateAddresses: false,
  backoff: DEFAULT_BACKOFF,
  retentionMs: 7 * 24 * 3_600_000,
};

/** The least time between two full looks at the outbox when nudged. */
const MIN_POLL_GAP_MS = 100;

export type AttemptOutcome = 'delivered' | 'retrying' | 'failed';

export interface DeliveryDeps {
  reads: WebhookReads;
  log: SessionLog;
  clock: Clock;
  logger?: Logger | undefined;
  forests: ForestPlacement;
  /** Told of every attempt (the metrics). */
  observe?: ((outcome: AttemptOutcome, seconds: number) => void) | undefined;
  /** The transport; a test may wrap it. */
  send?: ((request: WebhookRequest) => Promise<SendOutcome>) | undefined;
  random?: (() => number) | undefined;
}

export class DeliveryWorker {
  private readonly streams = new Set<string>();
  /** Deliveries settled here whose mark has not committed yet (`webhookId eventId`). */
  private readonly recording = new Set<string>();
  private readonly endpoints = new Map<string, number>();
  private inFlight = 0;
  private timer: NodeJS.Timeout | undefined;
  private polling = false;
  private again = false;
  private stopped = true;
  private lastPrune = 0;
  private lastPoll = 0;
  /** When the scheduled look is due. */
  private soonest = 0;

  constructor(
    private readonly deps: DeliveryDeps,
    readonly options: DeliveryOptions,
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.nudge();
  }

  /** Stop sending. Attempts in flight are not recorded: their deliveries are sent again later. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * Look at the outbox soon (something was queued, or a stream is free): at once, or
   * MIN_POLL_GAP_MS after the last look, so a burst of commits makes a few looks, not one each.
   */
  nudge(): void {
    if (this.stopped) return;
    if (this.polling) {
      this.again = true;
      return;
    }
    if (this.timer !== undefined && this.soonest <= Date.now() + MIN_POLL_GAP_MS) return;
    this.schedule(Math.max(0, this.lastPoll + MIN_POLL_GAP_MS - Date.now()));
  }

  private schedule(ms: number): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.soonest = Date.now() + ms;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.poll();
    }, ms);
    this.timer.unref();
  }

  private async poll(): Promise<void> {
    if (this.stopped) return;
    this.polling = true;
    this.again = false;
    this.lastPoll = Date.now();
    try {
      await this.pruneNow();
      const free = this.options.concurrency - this.inFlight;
      if (free > 0) {
        const due = await this.deps.reads.due(this.deps.clock.now(), this.streams.size + free, this.deps.forests.instanceId);
        const tried = new Set<string>();
        for (const delivery of due) {
          if (this.stopped || this.inFlight >= this.options.concurrency) break;
          const stream = streamKey(delivery.webhookId, delivery.rootId);
          const endpoint = originOf(delivery.url);
          if (this.streams.has(stream) || (this.endpoints.get(endpoint) ?? 0) >= this.options.perEndpoint) continue;
          if (this.recording.has(`${delivery.webhookId} ${delivery.eventId}`)) continue;
          if (!(await this.mayDeliver(delivery.rootId, tried))) continue;
          if (this.streams.has(stream) || this.stopped) continue;
          this.begin(delivery, stream, endpoint);
        }
      }
    } catch (err) {
      this.deps.logger?.error({ err }, 'reading the webhook outbox failed; retrying');
    } finally {
      this.polling = false;
      if (!this.stopped) this.schedule(this.again ? MIN_POLL_GAP_MS : this.options.pollMs);
    }
  }

  /** With forest leases: this instance holds the forest, or takes its lease now (nobody holds it). */
  private async mayDeliver(rootId: string, tried: Set<string>): Promise<boolean> {
    const forests = this.deps.forests;
    if (forests.holds(rootId)) return true;
    if (tried.has(rootId)) return false;
    tried.add(rootId);
    try {
      await forests.acquire(rootId);
      return true;
    } catch {
      return false;
    }
  }

  private begin(delivery: DueDelivery, stream: string, endpoint: string): void {
    this.streams.add(stream);
    this.endpoints.set(endpoint, (this.endpoints.get(endpoint) ?? 0) + 1);
    this.inFlight += 1;
    void this.attempt(delivery)
      .then(async (settled) => {
        // Settled (delivered or given up): the stream's next delivery, by an index seek past this
        // one, whose mark may not have committed yet; a full look costs as much as the backlog.
        if (!settled || this.stopped) return undefined;
        return this.deps.reads.head(delivery.webhookId, delivery.rootId, delivery.seq, this.deps.clock.now());
      })
      .catch((err: unknown) => {
        this.deps.logger?.error({ err }, 'reading the webhook outbox failed; retrying');
        return undefined;
      })
      .then((next) => {
        this.streams.delete(stream);
        const left = (this.endpoints.get(endpoint) ?? 1) - 1;
        if (left === 0) this.endpoints.delete(endpoint);
        else this.endpoints.set(endpoint, left);
        this.inFlight -= 1;
        if (next !== undefined && !this.stopped && this.inFlight < this.options.concurrency && (this.endpoints.get(endpoint) ?? 0) < this.options.perEndpoint) {
          this.begin(next, stream, originOf(next.url));
          return;
        }
        if (!this.deps.forests.exclusive && !this.hasStreamOf(delivery.rootId)) void this.deps.forests.releaseIfIdle(delivery.rootId);
        if (next !== undefined) this.nudge();
      });
  }

  private hasStreamOf(rootId: string): boolean {
    for (const stream of this.streams) if (stream.endsWith(` ${rootId}`)) return true;
    return false;
  }

  /** Sends once and queues the outcome's mark; true when the delivery is settled (delivered or failed). */
  private async attempt(delivery: DueDelivery): Promise<boolean> {
    const started = this.deps.clock.now();
    const outcome = await this.sendOne(delivery, started);
    if (this.stopped) return false;
    const at = this.deps.clock.now();
    const change = this.changeFor(delivery, outcome, at);
    this.deps.observe?.(change.state === 'delivered' ? 'delivered' : change.state === 'failed' ? 'failed' : 'retrying', (at - started) / 1000);
    if (change.state === 'failed') {
      this.deps.logger?.warn({ webhookId: delivery.webhookId, deliveryId: delivery.eventId, attempts: change.attempts, error: change.error }, 'a webhook delivery failed for good');
    }
    this.deps.log.changeWebhooks(change);
    const key = `${delivery.webhookId} ${delivery.eventId}`;
    const recorded = this.deps.log.durable(delivery.rootId).then(
      () => this.recording.delete(key),
      (err: unknown) => {
        this.recording.delete(key);
        this.deps.logger?.warn({ err, webhookId: delivery.webhookId, deliveryId: delivery.eventId }, 'recording a webhook attempt failed; the delivery will be sent again');
      },
    );
    if (change.state === 'pending') {
      // A retry is not due before its mark commits: wait, so no look finds it still due now.
      await recorded;
      return false;
    }
    // Settled: the stream goes on before the mark commits; until then no look sends this one again.
    this.recording.add(key);
    return true;
  }

  private async sendOne(delivery: DueDelivery, now: number): Promise<SendOutcome> {
    let key: Buffer;
    try {
      key = parseSecret(delivery.secret);
    } catch {
      return { kind: 'error', reason: 'network', message: 'the subscription secret is unusable' };
    }
    // An admin's subscription by `allowPrivate`, a tenant's by `tenantPrivateAddresses`.
    const allowPrivate = delivery.tenantId === undefined ? this.options.allowPrivate : this.options.tenantPrivateAddresses;
    const headers = signatureHeaders(key, delivery.eventId, Math.floor(now / 1000), delivery.payload);
    const send = this.deps.send ?? sendWebhook;
    return send({
      url: new URL(delivery.url),
      headers: { ...headers },
      body: delivery.payload,
      timeoutMs: this.options.timeoutMs,
      maxResponseBytes: this.options.maxResponseBytes,
      allowPrivate,
    });
  }

  /** What an attempt's outcome makes of the delivery. */
  changeFor(delivery: DueDelivery, outcome: SendOutcome, at: number): Extract<WebhookChange, { op: 'attempted' }> {
    const attempts = delivery.attempts + 1;
    const base = { op: 'attempted' as const, webhookId: delivery.webhookId, eventId: delivery.eventId, rootId: delivery.rootId, attempts, at };
    const status = outcome.kind === 'response' ? outcome.status : null;
    if (status !== null && status >= 200 && status < 300) return { ...base, state: 'delivered', nextAt: at, status, error: null };
    const error = outcome.kind === 'response' ? `the receiver answered ${outcome.status}` : `${outcome.reason}: ${outcome.message}`;
    const retryable = outcome.kind === 'error' ? outcome.reason !== 'address' : status! >= 500 || status === 429;
    let delay = retryDelayMs(attempts, this.options.backoff, this.deps.random);
    if (outcome.kind === 'response') delay = Math.max(delay, parseRetryAfter(outcome.retryAfter, at) ?? 0);
    const nextAt = at + delay;
    if (!retryable || nextAt > delivery.windowStart + this.options.maxAgeMs) return { ...base, state: 'failed', nextAt: at, status, error };
    return { ...base, state: 'pending', nextAt, status, error };
  }

  private async pruneNow(): Promise<void> {
    const now = this.deps.clock.now();
    if (now - this.lastPrune < 3_600_000) return;
    this.lastPrune = now;
    this.deps.log.changeWebhooks({ op: 'prune', before: now - this.options.retentionMs });
    await this.deps.log.durable().catch(() => undefined);
  }
}

function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}
