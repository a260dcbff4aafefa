/**
 * A minimal client of a server's inspector (the Chrome DevTools protocol over the WebSocket
 * that `node --inspect=127.0.0.1:0` opens): how the soak reads the heap a server keeps after a
 * full collection, and takes heap snapshots, without any route of its own in the product.
 * Only the methods it calls are sent; no domain is enabled, so the server runs as it would
 * without a client attached, except while a collection or a snapshot is asked for.
 */
import { createWriteStream } from 'node:fs';
import { WebSocket } from 'undici';

interface Reply {
  id?: number;
  method?: string;
  params?: Record<string, unknown>;
  result?: Record<string, unknown>;
  error?: { message: string };
}

export class Inspector {
  private next = 1;
  private readonly waiting = new Map<number, { resolve: (result: Record<string, unknown>) => void; reject: (error: Error) => void }>();
  private readonly listeners = new Map<string, (params: Record<string, unknown>) => void>();

  private constructor(private readonly socket: WebSocket) {
    socket.addEventListener('message', (event) => {
      const reply = JSON.parse(String(event.data)) as Reply;
      if (reply.id === undefined) {
        if (reply.method !== undefined) this.listeners.get(reply.method)?.(reply.params ?? {});
        return;
      }
      const waiter = this.waiting.get(reply.id);
      this.waiting.delete(reply.id);
      if (reply.error !== undefined) waiter?.reject(new Error(reply.error.message));
      else waiter?.resolve(reply.result ?? {});
    });
    socket.addEventListener('close', () => {
      for (const waiter of this.waiting.values()) waiter.reject(new Error('the inspector closed'));
      this.waiting.clear();
    });
  }

  /** Connect to the WebSocket address a server printed (`Debugger listening on ws://…`). */
  static async connect(url: string): Promise<Inspector> {
    const socket = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      socket.addEventListener('open', () => resolve(), { once: true });
      socket.addEventListener('error', () => reject(new Error(`cannot connect to the inspector at ${url}`)), { once: true });
    });
    return new Inspector(socket);
  }

  send(method: string, params: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.socket.send(JSON.stringify({ id, method, params }));
    });
  }

  /**
   * The heap V8 keeps after full collections (two: the second frees what the first's
   * finalizers and weak callbacks let go), in bytes.
   */
  async settledHeap(): Promise<{ used: number; total: number }> {
    await this.send('HeapProfiler.collectGarbage');
    await this.send('HeapProfiler.collectGarbage');
    const usage = await this.send('Runtime.getHeapUsage');
    return { used: Number(usage.usedSize), total: Number(usage.totalSize) };
  }

  /** Write a heap snapshot (the .heapsnapshot format DevTools reads) to `path`. */
  async heapSnapshot(path: string): Promise<void> {
    const file = createWriteStream(path);
    this.listeners.set('HeapProfiler.addHeapSnapshotChunk', (params) => file.write(String(params.chunk)));
    try {
      await this.send('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
    } finally {
      this.listeners.delete('HeapProfiler.addHeapSnapshotChunk');
      await new Promise<void>((resolve, reject) => file.end((error?: Error | null) => (error ? reject(error) : resolve())));
    }
  }

  close(): void {
    this.socket.close();
  }
}
