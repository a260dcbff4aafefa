/**
 * What one request log line costs: the service's logger writing to a file the way the server
 * writes to standard output (asynchronously, with writes in flight while new lines arrive),
 * through pino's default destination and through the service's own (4 KiB chunks, see
 * src/logger.ts), in alternating rounds of the same run. Each request logs two such lines.
 *
 *   npx tsx bench/log-lines.ts [--lines 400000] [--rounds 3]
 */
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { LOG_CHUNK_BYTES, loggerOptions } from '../src/logger.js';
import { arg } from './lib.js';

const lines = arg('lines', 400_000);
const rounds = arg('rounds', 3);
const dir = mkdtempSync(join(tmpdir(), 'agentforest-log-'));

/** CPU µs per line for `lines` lines, two per request, yielding to the event loop every 50 requests. */
async function perLine(maxWrite: number | undefined): Promise<number> {
  const destination = pino.destination({ dest: join(dir, 'log'), sync: false, minLength: 0, ...(maxWrite === undefined ? {} : { maxWrite }) });
  await once(destination, 'ready');
  const log = pino(loggerOptions('info'), destination).child({ reqId: '019acb2e-4a1b-7c2d-9e3f-0123456789ab' });
  const started = process.cpuUsage();
  for (let i = 0; i < lines / 2; i++) {
    log.info({ req: { method: 'POST', url: '/v1/agents/agt_01a22c83-61bb-7000-99ea-ff5951f017de/tool-calls', host: '127.0.0.1:3000', ip: '127.0.0.1', socket: { remotePort: 40_000 + (i % 1000) } } }, 'incoming request');
    log.info({ res: { statusCode: 200 }, responseTime: 1.234 }, 'request completed');
    if (i % 50 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  const used = process.cpuUsage(started);
  // The destination opened the file and closes it once everything is written.
  const closed = once(destination, 'close');
  destination.end();
  await closed;
  return (used.user + used.system) / lines;
}

try {
  const table: Record<string, Record<string, number>> = { 'pino default (16 KiB chunks)': {}, [`agentforest (${LOG_CHUNK_BYTES / 1024} KiB chunks)`]: {}, 'ratio': {} };
  await perLine(LOG_CHUNK_BYTES); // warm-up
  for (let round = 1; round <= rounds; round++) {
    const pinoDefault = await perLine(undefined);
    const ours = await perLine(LOG_CHUNK_BYTES);
    table['pino default (16 KiB chunks)']![`round ${round}`] = +pinoDefault.toFixed(2);
    table[`agentforest (${LOG_CHUNK_BYTES / 1024} KiB chunks)`]![`round ${round}`] = +ours.toFixed(2);
    table.ratio![`round ${round}`] = +(ours / pinoDefault).toFixed(2);
  }
  console.log(`CPU µs per log line, ${lines} lines per round (two per request), ours / pino's default`);
  console.table(table);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
