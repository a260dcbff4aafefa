/**
 * Webhooks survive crashes end to end: the real server as a child process on a SQLite file, a
 * receiver on loopback subscribed to `turn.ended`, roots running turns from concurrent loops,
 * and the server SIGKILLed at a seeded random moment, restarted on the same file and its roots
 * resumed, ITERATIONS times. Then, with the outbox drained: every turn-end entry in the logs was
 * delivered at least once, nothing was delivered that no log holds, and a repeated delivery
 * always repeats the same event under the same `webhook-id`.
 *
 * Bounded: every request and wait has a timeout. `npm test` runs a fixed seed and a few kills;
 * `npm run test:chaos` runs many more on a random seed, printed for replay
 * (AGENTFOREST_CHAOS_SEED=<seed>; see fixtures/chaos.ts).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { chaosRuns, chaosSeed } from '../fixtures/chaos.js';
import { closeWithTest, tempDir } from '../fixtures/cleanup.js';
import { mulberry32 } from '../fixtures/random.js';
import { ServerClient, startServer, type AgentRef, type RunningServer } from '../fixtures/server-process.js';
import { until } from '../fixtures/until.js';

const ITERATIONS = chaosRuns(6, 40);
const ROOTS = 3;
const SEED = chaosSeed('webhook crash test', 664738);

interface Delivered {
  id: string;
  body: string;
}

let receiver: Server | undefined;
afterAll(async () => {
  receiver?.closeAllConnections();
  await new Promise((r) => (receiver === undefined ? r(undefined) : receiver.close(r)));
});

/** A receiver that records every request; it answers 500 to one in five (seeded), so retries happen too. */
async function startReceiver(random: () => number): Promise<{ url: string; got: Delivered[] }> {
  const got: Delivered[] = [];
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      got.push({ id: String(req.headers['webhook-id']), body });
      res.statusCode = random() < 0.2 ? 500 : 200;
      res.end();
    });
  });
  await new Promise<void>((r) => receiver!.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`, got };
}

/** Turns on `root` until `stop()` says so: claim a step and answer it, or send a message. */
async function load(client: ServerClient, root: AgentRef, stop: () => boolean, n: { sent: number }): Promise<void> {
  while (!stop()) {
    try {
      const step = await client.claim(root, 0);
      if (step !== null) await client.postOutput(root, step.id, { content: 'done' });
      else await client.send(root.id, `work ${n.sent++}`);
    } catch {
      // The kill landed in this request: expected; the loop ends with it.
      return;
    }
  }
}

describe('webhooks across crashes', () => {
  it(`every turn-end in the logs is delivered at least once and nothing else, duplicates under one webhook-id (seed ${SEED})`, { timeout: chaosRuns(120_000, 900_000) }, async () => {
    const random = mulberry32(SEED);
    const hook = await startReceiver(mulberry32(SEED + 1));
    const dir = tempDir('agentforest-webhook-crash-');
    const env = {
      AGENTFOREST_WEBHOOK_ALLOW_PRIVATE: 'true',
      AGENTFOREST_WEBHOOK_BACKOFF_MS: '20',
      AGENTFOREST_STEP_LEASE_MS: '60000',
    };
    const launch = async (): Promise<RunningServer> => {
      const server = await startServer({ dataPath: join(dir, 'data.db'), env });
      closeWithTest(() => server.stop('SIGKILL'));
      return server;
    };
    let server = await launch();
    let client = new ServerClient(server);
    const sub = await client.expect<{ id: string }>(201, 'POST', '/v1/webhooks', { body: { url: hook.url, events: ['turn.ended'] } });
    let roots: AgentRef[] = [];
    for (let i = 0; i < ROOTS; i++) roots.push(await client.createRoot());
    const counter = { sent: 0 };
    for (let iteration = 0; iteration < ITERATIONS; iteration++) {
      if (iteration > 0) {
        server = await launch();
        client = new ServerClient(server);
        roots = await Promise.all(roots.map((r) => client.resume(r.id)));
      }
      let killed = false;
      const loops = roots.map((root) => load(client, root, () => killed, counter));
      const delayMs = 50 + Math.floor(random() * 400);
      await new Promise((r) => setTimeout(r, delayMs));
      killed = true;
      await server.stop('SIGKILL');
      await Promise.all(loops);
    }
    // The last start delivers what is left.
    server = await launch();
    client = new ServerClient(server);
    await until(async () => {
      const pending = await client.expect<{ items: unknown[] }>(200, 'GET', `/v1/webhooks/${sub.id}/deliveries?state=pending&limit=1`);
      return pending.items.length === 0;
    }, 'the outbox drained', { timeoutMs: 120_000 });

    const inLogs = new Map<string, string>();
    for (const root of roots) {
      for (const entry of await client.session(root.id)) {
        if (entry.type === 'turn-end') inLogs.set(`${root.id}:${entry.seq}`, String((entry as { turnId?: string }).turnId));
      }
    }
    const received = new Map<string, Set<string>>();
    const bodiesById = new Map<string, Set<string>>();
    for (const d of hook.got) {
      const { data } = JSON.parse(d.body) as { data: { agentId: string; seq: number; turnId: string } };
      const key = `${data.agentId}:${data.seq}`;
      if (!received.has(key)) received.set(key, new Set());
      received.get(key)!.add(d.id);
      if (!bodiesById.has(d.id)) bodiesById.set(d.id, new Set());
      bodiesById.get(d.id)!.add(d.body);
      expect(inLogs.get(key), `a delivered turn.ended (${key}) that no log holds`).toBe(data.turnId);
    }
    const missing = [...inLogs.keys()].filter((k) => !received.has(k));
    expect(missing, 'turn-ends in the logs never delivered').toEqual([]);
    for (const [key, ids] of received) expect(ids.size, `one event (${key}) under several webhook-ids`).toBe(1);
    for (const [id, bodies] of bodiesById) expect(bodies.size, `webhook-id ${id} carrying different bodies`).toBe(1);
    const duplicates = hook.got.length - bodiesById.size;
    console.log(`webhook crash test: ${ITERATIONS} kills, ${inLogs.size} turn-ends in the logs, ${bodiesById.size} distinct events delivered, ${hook.got.length} requests (${duplicates} repeats, retries of 500s included)`);
    // Work happened (under a loaded CI run, a kill can land before most loops finish a turn).
    expect(inLogs.size).toBeGreaterThan(0);
  });
});
