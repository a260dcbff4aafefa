/**
 * Webhook subscriptions and the outbox in memory: the same rules as the SQL stores (one
 * delivery per event and matching subscription, none twice; a stream's head is its oldest
 * pending delivery), for the memory store and its tests. A tenant's subscription matches only
 * events of forests whose root's header names its tenant, which the store tells (`tenantOfRoot`).
 */
import type { Delivery, DeliveryQuery, DueDelivery, OutboxBacklog, OutboxEvent, WebhookChange, WebhookReads, WebhookSubscription } from '../../sessions/outbox.js';

interface StoredDelivery extends Delivery {
  payload: string;
}

export class MemoryWebhooks implements WebhookReads {
  private readonly subs = new Map<string, WebhookSubscription>();
  /** Every delivery, in outbox order (seq). */
  private readonly rows: StoredDelivery[] = [];
  private readonly byKey = new Map<string, StoredDelivery>();
  private nextSeq = 1;

  /** `tenantOfRoot`: the tenant in a stored root's header (undefined: none, or no such root). */
  constructor(private readonly tenantOfRoot: (rootId: string) => string | undefined) {}

  /** Applies a committed batch's outbox events and then its webhook changes. */
  apply(outbox: readonly OutboxEvent[], changes: readonly WebhookChange[]): void {
    for (const event of outbox) {
      for (const sub of this.subs.values()) {
        if (!sub.events.includes(event.type) || (sub.rootId !== null && sub.rootId !== event.rootId)) continue;
        if (sub.tenantId !== undefined && sub.tenantId !== this.tenantOfRoot(event.rootId)) continue;
        const key = `${sub.id} ${event.id}`;
        if (this.byKey.has(key)) continue;
        const row: StoredDelivery = {
          webhookId: sub.id,
          eventId: event.id,
          type: event.type,
          rootId: event.rootId,
          state: 'pending',
          attempts: 0,
          createdAt: event.at,
          nextAt: event.at,
          windowStart: event.at,
          lastAttemptAt: null,
          lastStatus: null,
          lastError: null,
          deliveredAt: null,
          seq: this.nextSeq++,
          payload: event.payload,
        };
        this.rows.push(row);
        this.byKey.set(key, row);
      }
    }
    for (const change of changes) this.change(change);
  }

  private change(change: WebhookChange): void {
    switch (change.op) {
      case 'subscribe':
        this.subs.set(change.subscription.id, { ...change.subscription, events: [...change.subscription.events] });
        return;
      case 'unsubscribe':
        this.subs.delete(change.webhookId);
        this.remove((row) => row.webhookId === change.webhookId);
        return;
      case 'attempted': {
        const row = this.byKey.get(`${change.webhookId} ${change.eventId}`);
        if (row === undefined || row.state !== 'pending') return;
        row.state = change.state;
        row.attempts = change.attempts;
        row.lastAttemptAt = change.at;
        row.nextAt = change.nextAt;
        row.lastStatus = change.status;
        row.lastError = change.error;
        if (change.state === 'delivered') row.deliveredAt = change.at;
        return;
      }
      case 'retry': {
        const row = this.byKey.get(`${change.webhookId} ${change.eventId}`);
        if (row === undefined || row.state !== 'failed') return;
        row.state = 'pending';
        row.nextAt = change.at;
        row.windowStart = change.at;
        return;
      }
      case 'prune':
        this.remove((row) => row.state === 'delivered' && (row.deliveredAt ?? 0) < change.before);
        return;
    }
  }

  private remove(test: (row: StoredDelivery) => boolean): void {
    for (let i = this.rows.length - 1; i >= 0; i--) {
      const row = this.rows[i]!;
      if (!test(row)) continue;
      this.rows.splice(i, 1);
      this.byKey.delete(`${row.webhookId} ${row.eventId}`);
    }
  }

  async subscriptions(): Promise<WebhookSubscription[]> {
    return [...this.subs.values()].map((s) => ({ ...s, events: [...s.events] }));
  }

  async subscription(id: string): Promise<WebhookSubscription | undefined> {
    const sub = this.subs.get(id);
    return sub === undefined ? undefined : { ...sub, events: [...sub.events] };
  }

  async deliveries(webhookId: string, query: DeliveryQuery): Promise<Delivery[]> {
    const out: Delivery[] = [];
    for (let i = this.rows.length - 1; i >= 0 && out.length < query.limit; i--) {
      const row = this.rows[i]!;
      if (row.webhookId !== webhookId || (query.state !== undefined && row.state !== query.state)) continue;
      if (query.before !== undefined && row.seq >= query.before) continue;
      out.push(publicOf(row));
    }
    return out;
  }

  async delivery(webhookId: string, eventId: string): Promise<Delivery | undefined> {
    const row = this.byKey.get(`${webhookId} ${eventId}`);
    return row === undefined ? undefined : publicOf(row);
  }

  async due(now: number, limit: number): Promise<DueDelivery[]> {
    const heads = new Map<string, StoredDelivery>();
    for (const row of this.rows) {
      const stream = `${row.webhookId} ${row.rootId}`;
      if (row.state === 'pending' && !heads.has(stream)) heads.set(stream, row);
    }
    return [...heads.values()]
      .filter((row) => row.nextAt <= now && this.subs.has(row.webhookId))
      .sort((a, b) => a.nextAt - b.nextAt || a.seq - b.seq)
      .slice(0, limit)
      .map((row) => {
        const sub = this.subs.get(row.webhookId)!;
        return { ...publicOf(row), payload: row.payload, url: sub.url, secret: sub.secret, ...(sub.tenantId === undefined ? {} : { tenantId: sub.tenantId }) };
      });
  }

  async head(webhookId: string, rootId: string, afterSeq: number, now: number): Promise<DueDelivery | undefined> {
    const row = this.rows.find((r) => r.webhookId === webhookId && r.rootId === rootId && r.state === 'pending' && r.seq > afterSeq);
    const sub = this.subs.get(webhookId);
    if (row === undefined || sub === undefined || row.nextAt > now) return undefined;
    return { ...publicOf(row), payload: row.payload, url: sub.url, secret: sub.secret, ...(sub.tenantId === undefined ? {} : { tenantId: sub.tenantId }) };
  }

  async backlog(): Promise<OutboxBacklog> {
    let pending = 0;
    let oldest: number | null = null;
    for (const row of this.rows) {
      if (row.state !== 'pending') continue;
      pending += 1;
      if (oldest === null || row.createdAt < oldest) oldest = row.createdAt;
    }
    return { pending, oldestPendingAt: oldest };
  }
}

function publicOf(row: StoredDelivery): Delivery {
  const { payload: _payload, ...delivery } = row;
  return { ...delivery };
}
