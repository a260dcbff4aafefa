/**
 * The SQLite writer thread: owns the store's only writing connection and applies requests one
 * at a time, in the order they were posted. Every reply goes out after its transaction
 * committed (FULL sync: on disk), which is what the main thread's acknowledgement waits for.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { openConnection, SqliteWrites, type ConnectionOptions } from './sqlite-writes.js';
import type { WriterReply, WriterRequest } from './sqlite-writer.js';

const port = parentPort;
if (port === null) throw new Error('sqlite-writer-thread runs only as a worker thread');

const db = openConnection(workerData as ConnectionOptions);
const writes = new SqliteWrites(db);

port.on('message', (request: WriterRequest) => {
  let reply: WriterReply;
  try {
    switch (request.op) {
      case 'write':
        writes.write(request.batch);
        reply = { id: request.id, ok: true, value: null };
        break;
      case 'expire':
        reply = { id: request.id, ok: true, value: writes.expireIdempotency(request.now) };
        break;
      case 'settings':
        reply = { id: request.id, ok: true, value: writes.settings() };
        break;
      case 'close':
        db.close();
        reply = { id: request.id, ok: true, value: null };
        break;
    }
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    reply = { id: request.id, ok: false, message: error instanceof Error ? error.message : String(error), ...(typeof code === 'string' ? { code } : {}) };
  }
  port.postMessage(reply);
});
