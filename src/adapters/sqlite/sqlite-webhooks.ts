/**
 * Webhook subscriptions and the outbox in SQLite: the tables (schema version 6; a
 * subscription's tenant, version 10), the writes a batch applies inside its transaction (on the
 * writer's connection) and the reads (on the store's). An outbox event becomes one delivery row
 * per subscription matching it when the batch commits, by one INSERT ... SELECT; the unique
 * (subscription, event) pair keeps an event from being delivered twice as two rows. A tenant's
 * subscription matches only the events of forests whose root's header names that tenant (the
 * root's session row is written in or before the batch of the forest's first event).
 */
import type Database from 'better-sqlite3';
import {
  eventsColumn,
  type Delivery,
  type DeliveryQuery,
  type DueDelivery,
  type OutboxBacklog,
  type WebhookChange,
  type WebhookReads,
  type WebhookSubscription,
} from '../../sessions/outbox.js';
import type { OutboxRow } from '../batch-rows.js';
import { deliveryOf, dueOf, subscriptionOf, type DeliveryRow, type DueRow, type SubscriptionRow } from '../webhook-rows.js';

export const WEBHOOK_TABLES = `
  CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    root_id    TEXT,
    secret     TEXT NOT NULL,
    created_at INTEGER NOT NULL
  );
  CREATE TABLE webhook_deliveries (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id      TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    root_id         TEXT NOT NULL,
    type            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    state           TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    next_at         INTEGER NOT NULL,
    window_start    INTEGER NOT NULL,
    last_attempt_at INTEGER,
    last_status     INTEGER,
    last_error      TEXT,
    delivered_at    INTEGER,
    UNIQUE (webhook_id, event_id)
  );
  CREATE INDEX webhook_deliveries_streams ON webhook_deliveries (webhook_id, root_id, seq) WHERE state = 'pending';
  CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
  CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at) WHERE state = 'delivered';
`;

/** Version 10: the tenant whose key made a subscription (NULL: an admin's, global). */
export const WEBHOOK_TENANTS = `
  ALTER TABLE webhooks ADD COLUMN tenant_id TEXT;
`;

/** Applies outbox rows and webhook changes inside the caller's transaction. */
export function webhookWriter(db: Database.Database): (outbox: readonly OutboxRow[], changes: readonly WebhookChange[]) => void {
  const deliver = db.prepare<OutboxRow>(
    `INSERT OR IGNORE INTO webhook_deliveries (webhook_id, event_id, root_id, type, payload, state, attempts, created_at, next_at, window_start)
     SELECT w.id, e.event_id, e.root_id, e.type, e.payload, 'pending', 0, e.at, e.at, e.at
     FROM (SELECT ? AS event_id, ? AS type, ? AS root_id, ? AS at, ? AS payload) AS e
     JOIN webhooks w ON (w.root_id IS NULL OR w.root_id = e.root_id) AND instr(w.events, ',' || e.type || ',') > 0
       AND (w.tenant_id IS NULL OR w.tenant_id = (SELECT json_extract(s.header, '$.tenantId') FROM sessions s WHERE s.id = e.root_id))
     ORDER BY w.id`,
  );
  const subscribe = db.prepare('INSERT INTO webhooks (id, url, events, root_id, tenant_id, secret, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const dropDeliveries = db.prepare('DELETE FROM webhook_deliveries WHERE webhook_id = ?');
  const unsubscribe = db.prepare('DELETE FROM webhooks WHERE id = ?');
  const attempted = db.prepare(
    `UPDATE webhook_deliveries SET state = @state, attempts = @attempts, last_attempt_at = @at, next_at = @nextAt,
       last_status = @status, last_error = @error, delivered_at = CASE WHEN @state = 'delivered' THEN @at ELSE NULL END
     WHERE webhook_id = @webhookId AND event_id = @eventId AND state = 'pending'`,
  );
  const retry = db.prepare(
    `UPDATE webhook_deliveries SET state = 'pending', next_at = @at, window_start = @at
     WHERE webhook_id = @webhookId AND event_id = @eventId AND state = 'failed'`,
  );
  const prune = db.prepare("DELETE FROM webhook_deliveries WHERE state = 'delivered' AND delivered_at < ?");
  return (outbox, changes) => {
    for (const row of outbox) deliver.run(...row);
    for (const change of changes) {
      switch (change.op) {
        case 'subscribe': {
          const s = change.subscription;
          subscribe.run(s.id, s.url, eventsColumn(s.events), s.rootId, s.tenantId ?? null, s.secret, s.createdAt);
          break;
        }
        case 'unsubscribe':
          dropDeliveries.run(change.webhookId);
          unsubscribe.run(change.webhookId);
          break;
        case 'attempted': {
          const { op: _op, rootId: _root, ...values } = change;
          attempted.run(values);
          break;
        }
        case 'retry':
          retry.run({ webhookId: change.webhookId, eventId: change.eventId, at: change.at });
          break;
        case 'prune':
          prune.run(change.before);
          break;
      }
    }
  };
}

const DELIVERY_COLUMNS = `d.seq, d.webhook_id, d.event_id, d.root_id, d.type, d.state, d.attempts, d.created_at, d.next_at,
  d.window_start, d.last_attempt_at, d.last_status, d.last_error, d.delivered_at`;

/** The webhook reads, on the store's reading connection. */
export class SqliteWebhooks implements WebhookReads {
  private readonly statements;

  constructor(db: Database.Database) {
    this.statements = {
      all: db.prepare<[], SubscriptionRow>('SELECT * FROM webhooks ORDER BY created_at, id'),
      one: db.prepare<[string], SubscriptionRow>('SELECT * FROM webhooks WHERE id = ?'),
      page: db.prepare<{ webhookId: string; state: string | null; before: number; limit: number }, DeliveryRow>(
        `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d
         WHERE d.webhook_id = @webhookId AND (@state IS NULL OR d.state = @state) AND d.seq < @before
         ORDER BY d.seq DESC LIMIT @limit`,
      ),
      delivery: db.prepare<[string, string], DeliveryRow>(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d WHERE d.webhook_id = ? AND d.event_id = ?`),
      due: db.prepare<{ now: number; limit: number }, DueRow>(
        `SELECT ${DELIVERY_COLUMNS}, d.payload, w.url, w.secret, w.tenant_id
         FROM (SELECT min(seq) AS seq FROM webhook_deliveries WHERE state = 'pending' GROUP BY webhook_id, root_id) h
         JOIN webhook_deliveries d ON d.seq = h.seq JOIN webhooks w ON w.id = d.webhook_id
         WHERE d.next_at <= @now
         ORDER BY d.next_at, d.seq LIMIT @limit`,
      ),
      head: db.prepare<{ webhookId: string; rootId: string; afterSeq: number }, DueRow>(
        `SELECT ${DELIVERY_COLUMNS}, d.payload, w.url, w.secret, w.tenant_id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
         WHERE d.webhook_id = @webhookId AND d.root_id = @rootId AND d.state = 'pending' AND d.seq > @afterSeq ORDER BY d.seq LIMIT 1`,
      ),
      backlog: db.prepare<[], { pending: number; oldest: number | null }>(
        "SELECT count(*) AS pending, min(created_at) AS oldest FROM webhook_deliveries WHERE state = 'pending'",
      ),
    };
  }

  async subscriptions(): Promise<WebhookSubscription[]> {
    return this.statements.all.all().map(subscriptionOf);
  }

  async subscription(id: string): Promise<WebhookSubscription | undefined> {
    const row = this.statements.one.get(id);
    return row === undefined ? undefined : subscriptionOf(row);
  }

  async deliveries(webhookId: string, query: DeliveryQuery): Promise<Delivery[]> {
    return this.statements.page
      .all({ webhookId, state: query.state ?? null, before: query.before ?? Number.MAX_SAFE_INTEGER, limit: query.limit })
      .map(deliveryOf);
  }

  async delivery(webhookId: string, eventId: string): Promise<Delivery | undefined> {
    const row = this.statements.delivery.get(webhookId, eventId);
    return row === undefined ? undefined : deliveryOf(row);
  }

  async due(now: number, limit: number): Promise<DueDelivery[]> {
    return this.statements.due.all({ now, limit }).map(dueOf);
  }

  async head(webhookId: string, rootId: string, afterSeq: number, now: number): Promise<DueDelivery | undefined> {
    const row = this.statements.head.get({ webhookId, rootId, afterSeq });
    return row === undefined || row.next_at > now ? undefined : dueOf(row);
  }

  async backlog(): Promise<OutboxBacklog> {
    const row = this.statements.backlog.get()!;
    return { pending: row.pending, oldestPendingAt: row.oldest };
  }
}
