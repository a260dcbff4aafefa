/**
 * Webhook subscriptions and the outbox in PostgreSQL: the tables (migration 5; a
 * subscription's tenant, migration 10), the writes a batch applies inside its transaction, and
 * the reads. As in SQLite, an outbox event becomes one delivery row per matching subscription
 * when its batch commits (one INSERT ... SELECT for all of a batch's events), and (subscription,
 * event) is unique; a tenant's subscription matches only the events of forests whose root's
 * header names that tenant.
 *
 * With forest leases, `due` leaves out the forests another instance holds: each instance
 * delivers its own forests' rows, and those of forests nobody holds (it takes their lease
 * first; see the delivery worker).
 */
import type pg from 'pg';
import { eventsColumn, type Delivery, type DeliveryQuery, type DueDelivery, type OutboxBacklog, type WebhookChange, type WebhookReads, type WebhookSubscription } from '../../sessions/outbox.js';
import type { OutboxRow } from '../batch-rows.js';
import { deliveryOf, dueOf, subscriptionOf, type DeliveryRow, type DueRow, type SubscriptionRow } from '../webhook-rows.js';

export const POSTGRES_WEBHOOK_TABLES = `
  CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    root_id    TEXT,
    secret     TEXT NOT NULL,
    created_at BIGINT NOT NULL
  );
  CREATE TABLE webhook_deliveries (
    seq             BIGSERIAL PRIMARY KEY,
    webhook_id      TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    root_id         TEXT NOT NULL,
    type            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    state           TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    created_at      BIGINT NOT NULL,
    next_at         BIGINT NOT NULL,
    window_start    BIGINT NOT NULL,
    last_attempt_at BIGINT,
    last_status     INTEGER,
    last_error      TEXT,
    delivered_at    BIGINT,
    UNIQUE (webhook_id, event_id)
  );
  CREATE INDEX webhook_deliveries_streams ON webhook_deliveries (webhook_id, root_id, seq) WHERE state = 'pending';
  CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
  CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at) WHERE state = 'delivered';
`;

/** Migration 10: the tenant whose key made a subscription (NULL: an admin's, global). */
export const POSTGRES_WEBHOOK_TENANTS = `
  ALTER TABLE webhooks ADD COLUMN tenant_id TEXT;
`;

/** Applies a batch's outbox rows and webhook changes on the client of its transaction. */
export async function writeWebhookRows(client: pg.PoolClient, outbox: readonly OutboxRow[], changes: readonly WebhookChange[]): Promise<void> {
  if (outbox.length > 0) {
    const columns: unknown[][] = [[], [], [], [], [], []];
    outbox.forEach((row, i) => {
      for (let c = 0; c < 5; c++) columns[c]!.push(row[c]);
      columns[5]!.push(i);
    });
    await client.query(
      `INSERT INTO webhook_deliveries (webhook_id, event_id, root_id, type, payload, state, attempts, created_at, next_at, window_start)
       SELECT w.id, e.event_id, e.root_id, e.type, e.payload, 'pending', 0, e.at, e.at, e.at
       FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::int[]) AS e(event_id, type, root_id, at, payload, ord)
       JOIN webhooks w ON (w.root_id IS NULL OR w.root_id = e.root_id) AND position(',' || e.type || ',' in w.events) > 0
         AND (w.tenant_id IS NULL OR w.tenant_id = (SELECT (s.header::jsonb)->>'tenantId' FROM sessions s WHERE s.id = e.root_id))
       ORDER BY e.ord, w.id
       ON CONFLICT (webhook_id, event_id) DO NOTHING`,
      columns,
    );
  }
  for (const change of changes) {
    switch (change.op) {
      case 'subscribe': {
        const s = change.subscription;
        await client.query('INSERT INTO webhooks (id, url, events, root_id, tenant_id, secret, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
          s.id, s.url, eventsColumn(s.events), s.rootId, s.tenantId ?? null, s.secret, s.createdAt,
        ]);
        break;
      }
      case 'unsubscribe':
        await client.query('DELETE FROM webhook_deliveries WHERE webhook_id = $1', [change.webhookId]);
        await client.query('DELETE FROM webhooks WHERE id = $1', [change.webhookId]);
        break;
      case 'attempted':
        await client.query(
          `UPDATE webhook_deliveries SET state = $3, attempts = $4, last_attempt_at = $5, next_at = $6, last_status = $7, last_error = $8,
             delivered_at = CASE WHEN $3 = 'delivered' THEN $5::bigint ELSE NULL END
           WHERE webhook_id = $1 AND event_id = $2 AND state = 'pending'`,
          [change.webhookId, change.eventId, change.state, change.attempts, change.at, change.nextAt, change.status, change.error],
        );
        break;
      case 'retry':
        await client.query(
          `UPDATE webhook_deliveries SET state = 'pending', next_at = $3, window_start = $3 WHERE webhook_id = $1 AND event_id = $2 AND state = 'failed'`,
          [change.webhookId, change.eventId, change.at],
        );
        break;
      case 'prune':
        await client.query("DELETE FROM webhook_deliveries WHERE state = 'delivered' AND delivered_at < $1", [change.before]);
        break;
    }
  }
}

const DELIVERY_COLUMNS = `d.seq, d.webhook_id, d.event_id, d.root_id, d.type, d.state, d.attempts, d.created_at, d.next_at,
  d.window_start, d.last_attempt_at, d.last_status, d.last_error, d.delivered_at`;

export class PostgresWebhooks implements WebhookReads {
  constructor(private readonly pool: pg.Pool) {}

  async subscriptions(): Promise<WebhookSubscription[]> {
    const { rows } = await this.pool.query<SubscriptionRow>('SELECT * FROM webhooks ORDER BY created_at, id');
    return rows.map(subscriptionOf);
  }

  async subscription(id: string): Promise<WebhookSubscription | undefined> {
    const { rows } = await this.pool.query<SubscriptionRow>('SELECT * FROM webhooks WHERE id = $1', [id]);
    return rows[0] === undefined ? undefined : subscriptionOf(rows[0]);
  }

  async deliveries(webhookId: string, query: DeliveryQuery): Promise<Delivery[]> {
    const { rows } = await this.pool.query<DeliveryRow>(
      `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d
       WHERE d.webhook_id = $1 AND ($2::text IS NULL OR d.state = $2) AND d.seq < $3
       ORDER BY d.seq DESC LIMIT $4`,
      [webhookId, query.state ?? null, query.before ?? Number.MAX_SAFE_INTEGER, query.limit],
    );
    return rows.map(deliveryOf);
  }

  async delivery(webhookId: string, eventId: string): Promise<Delivery | undefined> {
    const { rows } = await this.pool.query<DeliveryRow>(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d WHERE d.webhook_id = $1 AND d.event_id = $2`, [
      webhookId,
      eventId,
    ]);
    return rows[0] === undefined ? undefined : deliveryOf(rows[0]);
  }

  async due(now: number, limit: number, instanceId?: string): Promise<DueDelivery[]> {
    const { rows } = await this.pool.query<DueRow>(
      `SELECT ${DELIVERY_COLUMNS}, d.payload, w.url, w.secret, w.tenant_id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
       WHERE d.state = 'pending' AND d.next_at <= $1
         AND d.seq = (SELECT min(h.seq) FROM webhook_deliveries h WHERE h.webhook_id = d.webhook_id AND h.root_id = d.root_id AND h.state = 'pending')
         AND ($3::text IS NULL OR NOT EXISTS (
           SELECT 1 FROM forest_leases l WHERE l.root_id = d.root_id AND l.owner <> $3 AND l.expires_at > now()))
       ORDER BY d.next_at, d.seq LIMIT $2`,
      [now, limit, instanceId ?? null],
    );
    return rows.map(dueOf);
  }

  async head(webhookId: string, rootId: string, afterSeq: number, now: number): Promise<DueDelivery | undefined> {
    const { rows } = await this.pool.query<DueRow>(
      `SELECT ${DELIVERY_COLUMNS}, d.payload, w.url, w.secret, w.tenant_id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
       WHERE d.webhook_id = $1 AND d.root_id = $2 AND d.state = 'pending' AND d.seq > $3 ORDER BY d.seq LIMIT 1`,
      [webhookId, rootId, afterSeq],
    );
    const row = rows[0];
    return row === undefined || Number(row.next_at) > now ? undefined : dueOf(row);
  }

  async backlog(): Promise<OutboxBacklog> {
    const { rows } = await this.pool.query<{ pending: string; oldest: string | null }>(
      "SELECT count(*) AS pending, min(created_at) AS oldest FROM webhook_deliveries WHERE state = 'pending'",
    );
    const row = rows[0]!;
    return { pending: Number(row.pending), oldestPendingAt: row.oldest === null ? null : Number(row.oldest) };
  }
}
