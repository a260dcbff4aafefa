/**
 * A dedicated PostgreSQL connection that LISTENs on a few channels and hands each NOTIFY to a
 * callback. A pooled connection cannot listen (it is handed to other queries), so this one is
 * its own client. When the connection drops, it reconnects with a growing delay (up to a few
 * seconds) and says so through `onConnected`, since notifications sent meanwhile are lost: the
 * listener then re-reads what it watches.
 */
import pg from 'pg';
import type { Listener, ListenOptions } from '../../cluster/cluster-database.js';

export interface NotificationOptions extends ListenOptions {
  url: string;
}

const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5_000;

export class NotificationListener implements Listener {
  private client: pg.Client | undefined;
  private stopped = false;
  private retryMs = FIRST_RETRY_MS;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly options: NotificationOptions) {}

  /** Connect and LISTEN; resolves once listening (or after the first failure, retrying in the background). */
  async start(): Promise<void> {
    await this.connect();
  }

  /** Stop listening for good and close the connection. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const client = new pg.Client({ connectionString: this.options.url });
    // A dropped connection is an 'error' and/or an 'end'; either schedules one reconnection.
    let dropped = false;
    const drop = (err?: unknown): void => {
      if (dropped) return;
      dropped = true;
      if (this.client === client) this.client = undefined;
      client.end().catch(() => undefined);
      if (this.stopped) return;
      this.options.logger?.warn({ err, channels: this.options.channels }, 'a LISTEN connection to the database dropped; reconnecting');
      this.retryLater();
    };
    client.on('error', drop);
    client.on('end', () => drop());
    client.on('notification', (msg) => this.options.onNotify(msg.channel, msg.payload));
    try {
      await client.connect();
      for (const channel of this.options.channels) await client.query(`LISTEN "${channel}"`);
    } catch (err) {
      drop(err);
      return;
    }
    if (this.stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.retryMs = FIRST_RETRY_MS;
    this.options.onConnected();
  }

  private retryLater(): void {
    if (this.timer !== undefined) return;
    const delay = this.retryMs;
    this.retryMs = Math.min(MAX_RETRY_MS, this.retryMs * 2);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.connect();
    }, delay);
    this.timer.unref();
  }
}
