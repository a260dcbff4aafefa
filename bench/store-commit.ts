/**
 * What one group commit costs the SQLite store, by batch size, with time-ordered message ids
 * (what the service mints) against random UUIDs, in the same run: each report writes one
 * parent entry and two staged rows for the child, all keyed by message id.
 *
 *   npx tsx bench/store-commit.ts [--rounds 200] [--sync full|normal]
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SessionEntry } from '../src/domain/session.js';
import { uuidV7Source } from '../src/sessions/ids.js';
import type { BatchEntry, PendingOp } from '../src/sessions/session-store.js';
import { SqliteSessionStore, type SqliteSyncMode } from '../src/adapters/sqlite/sqlite-store.js';
import { childHeader, rootHeader } from './lib.js';

const flag = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? undefined : process.argv[i + 1];
};
const rounds = Number(flag('rounds') ?? 200);
const synchronous = (flag('sync') ?? 'full') as SqliteSyncMode;

async function measure(ids: () => string, dir: string): Promise<Record<number, number>> {
  const path = join(dir, `${randomUUID()}.db`);
  const store = new SqliteSessionStore({ path, synchronous });
  await store.write({ headers: [rootHeader('parent'), childHeader('child', 'parent')], entries: [] });
  const at = new Date().toISOString();
  let seq = 0;
  let position = 0;
  const perReportUs: Record<number, number> = {};
  for (const size of [1, 10, 50]) {
    const started = performance.now();
    for (let r = 0; r < rounds; r++) {
      const entries: BatchEntry[] = [];
      const pending: PendingOp[] = [];
      for (let i = 0; i < size; i++) {
        seq++;
        const entry = { seq, type: 'message', at, messageId: `msg_${ids()}`, role: 'user', content: [{ type: 'text', text: 'a finding worth reporting to the parent' }], source: { kind: 'user' } } as SessionEntry;
        entries.push({ sessionId: 'parent', entry, rootId: 'parent', forestSeq: seq });
        for (let k = 0; k < 2; k++) {
          const message = { id: `msg_${ids()}`, role: 'tool' as const, content: [{ type: 'text' as const, text: 'ok' }], source: { kind: 'tool' as const } };
          pending.push({ op: 'put', sessionId: 'child', row: { kind: 'staged', position: position++, itemId: null, acceptedAt: at, message } });
        }
      }
      await store.write({ headers: [], entries, pending });
    }
    perReportUs[size] = +(((performance.now() - started) * 1000) / (rounds * size)).toFixed(1);
  }
  await store.close();
  return perReportUs;
}

const dir = mkdtempSync(join(tmpdir(), 'agentforest-commit-'));
try {
  const ordered = await measure(uuidV7Source(), dir);
  const random = await measure(randomUUID, dir);
  console.log(`µs of commit per report (1 entry + 2 pending rows), synchronous=${synchronous}, ${rounds} batches per size`);
  console.table({ 'time-ordered ids (UUIDv7)': ordered, 'random UUIDs': random });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
