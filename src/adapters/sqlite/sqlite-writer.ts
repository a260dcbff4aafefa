/**
 * Where the SQLite store's writes run. better-sqlite3 is synchronous, so a commit on the main
 * thread (B-tree inserts, the WAL write and, with FULL sync, its fsync) stalls every request
 * for its whole duration. The thread writer moves that work to a worker thread that owns the
 * only writing connection; the main thread keeps a connection for reads (WAL lets them run
 * beside the writer) and goes on serving while a batch commits. A write resolves only after
 * its transaction committed, so acknowledgement still means durable.
 *
 * The inline writer applies batches on the calling thread, on the store's own connection; it
 * serves `:memory:` databases, which one connection cannot share with another.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type Database from 'better-sqlite3';
import { SqliteWrites, type ConnectionOptions, type EncodedBatch, type WriterSettings } from './sqlite-writes.js';

export type WriterRequest =
  | { id: number; op: 'write'; batch: EncodedBatch }
  | { id: number; op: 'expire'; now: number }
  | { id: number; op: 'settings' }
  | { id: number; op: 'close' };

/** A failure crosses the thread as its message and SQLite's code (SQLITE_FULL, SQLITE_IOERR_WRITE…). */
export type WriterReply = { id: number; ok: true; value: unknown } | { id: number; ok: false; message: string; code?: string };

export interface SqliteWriter {
  write(batch: EncodedBatch): Promise<void>;
  expireIdempotency(now: number): Promise<number>;
  settings(): Promise<WriterSettings>;
  close(): Promise<void>;
}

type Distribute<T> = T extends unknown ? Omit<T, 'id'> : never;

/** Writes on the given connection, on the calling thread; closing it is its owner's business. */
export class InlineWriter implements SqliteWriter {
  private readonly writes;

  constructor(db: Database.Database) {
    this.writes = new SqliteWrites(db);
  }

  async write(batch: EncodedBatch): Promise<void> {
    this.writes.write(batch);
  }

  async expireIdempotency(now: number): Promise<number> {
    return this.writes.expireIdempotency(now);
  }

  async settings(): Promise<WriterSettings> {
    return this.writes.settings();
  }

  async close(): Promise<void> {
    // The connection belongs to the store.
  }
}

export class ThreadWriter implements SqliteWriter {
  private readonly worker: Worker;
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  private failure: Error | null = null;
  private closed: Promise<void> | null = null;

  constructor(options: ConnectionOptions) {
    this.worker = startWorker(options);
    // Idle, the worker does not keep the process alive; a request in flight does (see request).
    this.worker.unref();
    this.worker.on('message', (reply: WriterReply) => {
      const waiter = this.waiting.get(reply.id);
      if (waiter === undefined) return;
      this.waiting.delete(reply.id);
      if (this.waiting.size === 0) this.worker.unref();
      if (reply.ok) waiter.resolve(reply.value);
      else waiter.reject(Object.assign(new Error(reply.message), reply.code === undefined ? {} : { code: reply.code }));
    });
    const fail = (error: Error): void => {
      this.failure ??= error;
      for (const waiter of this.waiting.values()) waiter.reject(this.failure);
      this.waiting.clear();
    };
    this.worker.on('error', (error) => fail(new Error(`the SQLite writer thread failed: ${error.message}`, { cause: error })));
    this.worker.on('exit', (code) => fail(new Error(`the SQLite writer thread exited (code ${code})`)));
  }

  async write(batch: EncodedBatch): Promise<void> {
    await this.request({ op: 'write', batch });
  }

  async expireIdempotency(now: number): Promise<number> {
    return (await this.request({ op: 'expire', now })) as number;
  }

  async settings(): Promise<WriterSettings> {
    return (await this.request({ op: 'settings' })) as WriterSettings;
  }

  /** Applies every request posted before it, closes the connection and ends the thread. */
  close(): Promise<void> {
    this.closed ??= (async () => {
      if (this.failure === null) await this.request({ op: 'close' });
      await this.worker.terminate();
    })();
    return this.closed;
  }

  private request(body: Distribute<WriterRequest>): Promise<unknown> {
    if (this.failure !== null) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      if (this.waiting.size === 1) this.worker.ref();
      this.worker.postMessage({ ...body, id } as WriterRequest);
    });
  }
}

/**
 * The built thread module runs as is. From sources (tests, `tsx`), the worker first registers
 * tsx's loader, which a worker does not inherit, then imports the TypeScript module.
 */
function startWorker(options: ConnectionOptions): Worker {
  const built = new URL('./sqlite-writer-thread.js', import.meta.url);
  if (existsSync(fileURLToPath(built))) return new Worker(built, { workerData: options });
  const source = new URL('./sqlite-writer-thread.ts', import.meta.url).href;
  // require.resolve picks the CommonJS build; the worker imports the ES module beside it.
  const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;
  const bootstrap = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(source)}); });`;
  return new Worker(bootstrap, { eval: true, workerData: options });
}
