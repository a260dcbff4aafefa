/**
 * Crash safety end to end (issue 4, item 4): the real server as a child process on a SQLite
 * file, or on a PostgreSQL database, continuable children reporting quiet and wakeup to a
 * running, an idle and a woken parent from concurrent loops, SIGKILL in the middle of that
 * load, then a restart on the same file or database (with PostgreSQL, under the same instance
 * id, so its own unexpired leases are its at once) and a resume of every root. What must hold:
 * every message the first server acknowledged (a 200 report or a 201 child creation) is in its
 * recipient's session or pending state exactly once, every session is gap-free, each root turn
 * the crash left open goes on after the resume, and the storage itself agrees with no server
 * running: the SQLite file passes `PRAGMA integrity_check`; in either, each acknowledged
 * message is stored exactly once and every session's seqs (and, in PostgreSQL, every forest's
 * positions) run from 1 with no gap.
 *
 * Bounded and self-stopping: every request and wait has a timeout, and the test context kills any
 * server left running. Where the kill lands differs from run to run, so run it repeatedly:
 *
 *   for i in $(seq 20); do npx vitest run test/e2e/crash.test.ts || break; done
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { Receipt } from '../../src/contract/index.js';
import {
  ServerClient,
  startServer,
  type AgentRef,
  type LaunchOptions,
} from '../fixtures/server-process.js';
import type { Entry } from '../fixtures/wire.js';
import { closeWithTest, tempDir } from '../fixtures/cleanup.js';
import { freshDatabase } from '../fixtures/postgres.js';

/** Reports the load would send if the kill never came; the kill lands after KILL_AFTER_ACKS. */
const PLANNED_REPORTS = 300;
const CONCURRENT_LOOPS = 20;
const KILL_AFTER_ACKS = 100;
const LOAD_REQUEST_TIMEOUT_MS = 10_000;

const ACKNOWLEDGED_STATES = ['queued', 'staged', 'appended', 'turn-started', 'turn-ended'];
const PENDING_STATES = ['queued', 'staged'];

interface Child extends AgentRef {
  parentId: string;
  delivery: 'quiet' | 'wakeup';
}

/** A message the first server answered with its id: it must survive the crash. */
interface Acknowledged {
  messageId: string;
  recipient: string;
  sender: string;
  what: string;
}


/** What the load left: every acknowledged message, and the id of every session it made. */
interface CrashOutcome {
  acknowledged: Acknowledged[];
  sessionIds: string[];
}

function gapProblems(id: string, entries: readonly Entry[]): string[] {
  const seqs = entries.map((e) => e.seq);
  const expected = entries.map((_, i) => i + 1);
  return seqs.every((seq, i) => seq === expected[i]) ? [] : [`session ${id} has seqs ${JSON.stringify(seqs)}`];
}

/** Turns started and not ended in a session. */
function openTurns(entries: readonly Entry[]): string[] {
  const ended = new Set(entries.filter((e) => e.type === 'turn-end').map((e) => e.turnId));
  return entries.filter((e) => e.type === 'turn-start' && !ended.has(e.turnId)).map((e) => e.turnId ?? '');
}

/**
 * The load, the kill, the restart on the same storage (`launch`, both times) and the resume,
 * with every check made through the restarted server's API; returns what the storage checks need.
 */
async function crashAndResume(launch: LaunchOptions): Promise<CrashOutcome> {
  const first = await startServer(launch);
  const api = new ServerClient(first);

  // A running parent: its step is claimed and awaits the backend's `lookup` result.
  const running = await api.createRoot({ id: 'crash-running' });
  await api.send(running.id, 'work on it');
  const held = await api.claim(running, 5_000);
  expect(held).not.toBeNull();
  const out = await api.postOutput(running, held!.id, { toolCalls: [{ id: 'call-lookup', name: 'lookup', input: { q: 'x' } }] });
  expect(out.awaiting.map((c) => c.name)).toEqual(['lookup']);
  // An idle parent that only hears quiet reports, and an idle one that wakeup reports wake.
  const idle = await api.createRoot({ id: 'crash-idle' });
  const woken = await api.createRoot({ id: 'crash-woken' });

  const acknowledged: Acknowledged[] = [];
  const children: Child[] = [];
  const startChildren = async (parent: AgentRef, count: number, delivery: Child['delivery']): Promise<void> => {
    for (let i = 0; i < count; i++) {
      const created = await api.expect<{ agent: { id: string }; agentToken: string; messageId: string }>(
        201,
        'POST',
        `/v1/agents/${parent.id}/children`,
        { token: parent.token, body: { mode: 'continuable', prompt: 'task' } },
      );
      children.push({ id: created.agent.id, token: created.agentToken, parentId: parent.id, delivery });
      acknowledged.push({ messageId: created.messageId, recipient: created.agent.id, sender: parent.id, what: 'child prompt' });
    }
  };
  await startChildren(running, 3, 'quiet');
  await startChildren(idle, 4, 'quiet');
  await startChildren(woken, 2, 'quiet');
  // The delivery mode applies to Activations set up from now on: the children below report as wakeup.
  await api.expect(200, 'PUT', '/v1/packages/subagent-report', { body: { config: { reportDelivery: 'wakeup' } } });
  await startChildren(running, 3, 'wakeup');
  await startChildren(woken, 3, 'wakeup');
  expect(children).toHaveLength(15);

  // The load: each loop takes the next report number until the kill; the kill is sent from
  // inside the loop that sees the KILL_AFTER_ACKS-th acknowledgement.
  let next = 0;
  let killed = false;
  let reportAcks = 0;
  const unexpected: string[] = [];
  const loop = async (): Promise<void> => {
    while (!killed && next < PLANNED_REPORTS) {
      const n = next++;
      const child = children[n % children.length]!;
      let res;
      try {
        res = await api.request<{ output: { messageId: string } }>('POST', `/v1/agents/${child.id}/tool-calls`, {
          token: child.token,
          body: { name: 'report', input: { output: `r-${n}` } },
          timeoutMs: LOAD_REQUEST_TIMEOUT_MS,
        });
      } catch (error) {
        // After the kill a request in flight fails without an answer: it was never acknowledged.
        if (!killed) unexpected.push(`report r-${n} failed before the kill: ${String(error).slice(0, 300)}`);
        continue;
      }
      if (res.status !== 200) {
        unexpected.push(`report r-${n} answered ${res.status} ${JSON.stringify(res.body)}`);
        continue;
      }
      acknowledged.push({ messageId: res.body.output.messageId, recipient: child.parentId, sender: child.id, what: `${child.delivery} report r-${n}` });
      reportAcks++;
      if (reportAcks >= KILL_AFTER_ACKS && !killed) {
        killed = true;
        first.child.kill('SIGKILL');
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENT_LOOPS }, loop));
  expect(unexpected).toEqual([]);
  expect(killed).toBe(true);
  expect(reportAcks).toBeGreaterThanOrEqual(KILL_AFTER_ACKS);
  expect(reportAcks).toBeLessThan(PLANNED_REPORTS);
  expect(await first.waitForExit()).toEqual({ code: null, signal: 'SIGKILL' });

  const second = await startServer(launch);
  const api2 = new ServerClient(second);
  const roots = [running, idle, woken];
  const sessionIds = [...roots.map((r) => r.id), ...children.map((c) => c.id)];

  // The log as the crash left it, before any resume writes to it.
  const atCrash = new Map<string, Entry[]>();
  for (const id of sessionIds) atCrash.set(id, await api2.session(id));
  const openAtCrash = new Map(roots.map((r) => [r.id, openTurns(atCrash.get(r.id)!)]));
  expect(openAtCrash.get(running.id)).toEqual([held!.turnId]);
  // Quiet reports never start a parent turn.
  expect(openAtCrash.get(idle.id)).toEqual([]);

  for (const root of roots) await api2.resume(root.id);

  const sessions = new Map<string, Entry[]>();
  for (const id of sessionIds) sessions.set(id, await api2.session(id));
  const problems: string[] = [];
  for (const [id, entries] of sessions) problems.push(...gapProblems(id, entries));

  for (const root of roots) {
    const entries = sessions.get(root.id)!;
    const before = atCrash.get(root.id)!;
    expect(entries.slice(0, before.length)).toEqual(before);
    // A turn the crash left open goes on: resume writes no end for it, and nothing failed.
    for (const turnId of openAtCrash.get(root.id)!) {
      const ends = entries.filter((e) => e.type === 'turn-end' && e.turnId === turnId).map((e) => e.reason);
      if (ends.length !== 0) problems.push(`root ${root.id} turn ${turnId} open at the crash ended ${JSON.stringify(ends)} at resume`);
    }
    const failed = entries.filter((e) => e.type === 'turn-end' && e.reason === 'failed').map((e) => e.turnId);
    if (failed.length !== 0) problems.push(`root ${root.id} has failed turn ends ${JSON.stringify(failed)}`);
  }

  // Where each message id is logged, across every session.
  const logged = new Map<string, { sessionId: string; seq: number }[]>();
  for (const [sessionId, entries] of sessions) {
    for (const e of entries) {
      if (e.type !== 'message' || e.messageId === undefined) continue;
      logged.set(e.messageId, [...(logged.get(e.messageId) ?? []), { sessionId, seq: e.seq }]);
    }
  }
  for (const [messageId, places] of logged) {
    if (places.length > 1) problems.push(`message ${messageId} is logged ${places.length} times: ${JSON.stringify(places)}`);
  }

  expect(new Set(acknowledged.map((a) => a.messageId)).size).toBe(acknowledged.length);
  for (const ack of acknowledged) {
    const places = logged.get(ack.messageId) ?? [];
    const res = await api2.request<Receipt>('GET', `/v1/messages/${ack.messageId}`);
    if (res.status !== 200) {
      problems.push(`${ack.what} ${ack.messageId} to ${ack.recipient}: lost (receipt ${res.status}, logged ${JSON.stringify(places)})`);
      continue;
    }
    const receipt = res.body;
    if (receipt.recipient !== ack.recipient || receipt.sender !== ack.sender || !ACKNOWLEDGED_STATES.includes(receipt.state)) {
      problems.push(`${ack.what} ${ack.messageId}: receipt ${JSON.stringify(receipt)}, expected recipient ${ack.recipient} from ${ack.sender}`);
    }
    const place = places[0];
    if (place === undefined) {
      if (!PENDING_STATES.includes(receipt.state)) problems.push(`${ack.what} ${ack.messageId}: in no session, yet its receipt says ${receipt.state}`);
    } else if (place.sessionId !== ack.recipient || PENDING_STATES.includes(receipt.state) || receipt.seq !== place.seq) {
      problems.push(`${ack.what} ${ack.messageId}: logged at ${JSON.stringify(place)}, receipt ${JSON.stringify(receipt)}`);
    }
  }
  expect(problems).toEqual([]);

  expect(await second.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  return { acknowledged, sessionIds };
}

describe('a SQLite server killed with SIGKILL under concurrent report load', { timeout: 60_000 }, () => {
  it('keeps every acknowledged message exactly once, gap-free sessions, each open root turn going on after resume and an intact file', async () => {
    const dataPath = join(tempDir('agentforest-crash-'), 'agentforest.db');
    const { acknowledged, sessionIds } = await crashAndResume({ dataPath });

    // The file itself, with no server running: intact, each acknowledged message stored exactly
    // once (as a logged message or a pending row), and every session's seqs 1..last_seq.
    const db = new Database(dataPath, { readonly: true });
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      const stored = db.prepare<[string, string], { n: number }>(
        // Message ids are indexed for messages and for the turn starts they prompt (which are marks).
        `SELECT (SELECT count(*) FROM entry_messages m WHERE m.message_id = ?
                   AND NOT EXISTS (SELECT 1 FROM entry_marks k WHERE k.session_id = m.session_id AND k.seq = m.seq))
              + (SELECT count(*) FROM pending WHERE message_id = ?) AS n`,
      );
      const notOnce = acknowledged
        .map((a) => ({ messageId: a.messageId, what: a.what, stored: stored.get(a.messageId, a.messageId)?.n }))
        .filter((a) => a.stored !== 1);
      expect(notOnce).toEqual([]);
      const seqRanges = db
        .prepare<[], { id: string; last_seq: number; n: number; lo: number | null; hi: number | null }>(
          // Chunks hold runs of seqs: their sizes add up to last_seq only if the runs neither overlap nor leave a gap.
          `SELECT s.id, s.last_seq, coalesce(sum(c.last_seq - c.first_seq + 1), 0) AS n, min(c.first_seq) AS lo, max(c.last_seq) AS hi
           FROM sessions s LEFT JOIN session_chunks c ON c.session_id = s.id GROUP BY s.id`,
        )
        .all();
      expect(seqRanges).toHaveLength(sessionIds.length);
      expect(seqRanges.filter((r) => r.n !== r.last_seq || (r.n > 0 && (r.lo !== 1 || r.hi !== r.last_seq)))).toEqual([]);
    } finally {
      db.close();
    }
  });
});

describe('a PostgreSQL server killed with SIGKILL under concurrent report load', { timeout: 60_000 }, () => {
  it('keeps every acknowledged message exactly once, gap-free sessions and forests, and each open root turn going on after resume', async () => {
    const database = await freshDatabase();
    closeWithTest(() => database.dispose());
    // The restart keeps the instance id, so the forests' unexpired leases are its own at once.
    const env = { AGENTFOREST_DATABASE_URL: database.url, AGENTFOREST_INSTANCE_ID: 'crash-instance' };
    // The data path is ignored with a database URL; `:memory:` keeps a misconfiguration from writing a file.
    const { acknowledged, sessionIds } = await crashAndResume({ dataPath: ':memory:', env });

    // The database itself, with no server running.
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      // Each acknowledged message stored exactly once: as a logged message or as a pending row.
      const stored = await client.query<{ id: string; n: string }>(
        `SELECT a.id, (SELECT count(*) FROM entries e WHERE e.message_id = a.id AND e.type = 'message')
                    + (SELECT count(*) FROM pending p WHERE p.message_id = a.id) AS n
         FROM unnest($1::text[]) AS a(id)`,
        [acknowledged.map((a) => a.messageId)],
      );
      expect(stored.rows).toHaveLength(acknowledged.length);
      expect(stored.rows.filter((r) => Number(r.n) !== 1)).toEqual([]);
      // Seqs are unique per session (the primary key): 1..last_seq with none missing is a count of last_seq.
      const sessions = await client.query<{ id: string; last_seq: string; n: string; lo: string | null; hi: string | null }>(
        `SELECT s.id, s.last_seq, count(e.seq) AS n, min(e.seq) AS lo, max(e.seq) AS hi
         FROM sessions s LEFT JOIN entries e ON e.session_id = s.id GROUP BY s.id, s.last_seq`,
      );
      expect(sessions.rows).toHaveLength(sessionIds.length);
      const gapped = sessions.rows.filter((r) => Number(r.n) !== Number(r.last_seq) || (Number(r.n) > 0 && (Number(r.lo) !== 1 || Number(r.hi) !== Number(r.last_seq))));
      expect(gapped).toEqual([]);
      // Forest positions are unique per root (an index): 1..max with none missing is a count of max.
      const forests = await client.query<{ root_id: string; n: string; lo: string; hi: string }>(
        'SELECT root_id, count(*) AS n, min(forest_seq) AS lo, max(forest_seq) AS hi FROM entries GROUP BY root_id',
      );
      expect(forests.rows).toHaveLength(3);
      expect(forests.rows.filter((r) => Number(r.lo) !== 1 || Number(r.n) !== Number(r.hi))).toEqual([]);
    } finally {
      await client.end();
    }
  });
});
