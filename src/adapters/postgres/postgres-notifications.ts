/**
 * One dedicated PostgreSQL connection per store that LISTENs on the channels of every listener
 * (the cluster's, the packages', the model providers' sharing) and hands each NOTIFY to the
 * listeners of its channel. A pooled connection cannot listen (it is handed to other queries),
 * so this one is its own client, opened when the first listener starts and closed when the last
 * stops. When it drops, it reconnects with a growing delay (up to a few seconds) and tells every
 * listener through `onConnected`, since notifications sent meanwhile are lost: each re-reads
 * what it watches. A listener that starts while the connection is up is told the same once its
 * channels are listened on.
 */
import pg from 'pg';
import type { Listener, ListenOptions } from '../../cluster/cluster-database.js';

const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5_000;

export class Notifications {
  private readonly listeners = new Set<ListenOptions>();
  private client: pg.Client | undefined;
  /** The channels the open connection LISTENs on. */
  private listening = new Set<string>();
  private retryMs = FIRST_RETRY_MS;
  private timer: NodeJS.Timeout | undefined;
  /** The connection being opened, if one is. */
  private connecting: Promise<void> | undefined;

  constructor(private readonly url: string) {}

  /** A listener on this store's one LISTEN connection. */
  listen(options: ListenOptions): Listener {
    return {
      start: () => this.add(options),
      stop: () => this.remove(options),
    };
  }

  /** Resolves once the listener's channels are listened on (or after a failed connection, retried in the background). */
  private async add(options: ListenOptions): Promise<void> {
    this.listeners.add(options);
    if (this.connecting !== undefined) await this.connecting;
    if (this.client === undefined) {
      if (this.timer === undefined) await this.connect();
      return; // the connection's onConnected tells this listener too
    }
    const client = this.client;
    try {
      for (const channel of options.channels) await this.listenOn(client, channel);
    } catch {
      return; // the connection dropped: its reconnection listens on every channel and tells everyone
    }
    if (this.client === client && this.listeners.has(options)) options.onConnected();
  }

  private async remove(options: ListenOptions): Promise<void> {
    if (!this.listeners.delete(options) || this.listeners.size > 0) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await this.connecting;
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private async listenOn(client: pg.Client, channel: string): Promise<void> {
    if (this.listening.has(channel)) return;
    await client.query(`LISTEN "${channel}"`);
    this.listening.add(channel);
  }

  private connect(): Promise<void> {
    this.connecting = this.open().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  private async open(): Promise<void> {
    if (this.listeners.size === 0) return;
    const client = new pg.Client({ connectionString: this.url });
    // A dropped connection is an 'error' and/or an 'end'; either schedules one reconnection.
    let dropped = false;
    const drop = (err?: unknown): void => {
      if (dropped) return;
      dropped = true;
      if (this.client === client) this.client = undefined;
      client.end().catch(() => undefined);
      if (this.listeners.size === 0) return;
      this.loggerOf()?.warn({ err, channels: [...this.channelsWanted()] }, 'a LISTEN connection to the database dropped; reconnecting');
      this.retryLater();
    };
    client.on('error', drop);
    client.on('end', () => drop());
    client.on('notification', (msg) => {
      for (const listener of [...this.listeners]) if (listener.channels.includes(msg.channel)) listener.onNotify(msg.channel, msg.payload);
    });
    this.listening = new Set();
    try {
      await client.connect();
      for (const channel of this.channelsWanted()) await this.listenOn(client, channel);
    } catch (err) {
      drop(err);
      return;
    }
    if (this.listeners.size === 0) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.retryMs = FIRST_RETRY_MS;
    for (const listener of [...this.listeners]) listener.onConnected();
  }

  private channelsWanted(): Set<string> {
    return new Set([...this.listeners].flatMap((l) => l.channels));
  }

  private loggerOf(): ListenOptions['logger'] {
    return [...this.listeners].find((l) => l.logger !== undefined)?.logger;
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
