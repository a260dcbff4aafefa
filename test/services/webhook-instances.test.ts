/**
 * Webhooks with several instances on one PostgreSQL database: an instance does not deliver the
 * rows of a forest another instance holds, and when that instance goes (its leases given up),
 * another one takes the forest's pending deliveries over and delivers them, under the same ids.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openClusterStore } from '../../src/composition/open-store.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { claim, createRoot, postOutput, send, startHarness, until, type Harness } from '../fixtures/harness.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';

let db: TestDatabase;
const servers: Server[] = [];

beforeEach(async () => {
  db = await freshDatabase();
  closeWithTest(() => db.dispose());
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => { s.closeAllConnections(); s.close(r); })));
});

async function instance(id: string): Promise<Harness> {
  const { store, cluster } = await openClusterStore(db.url, { instanceId: id, leaseMs: 60_000 });
  return startHarness({
    store,
    cluster,
    url: `http://${id.toLowerCase()}`,
    webhooks: { allowPrivate: true, pollMs: 20, backoff: { baseMs: 20, maxMs: 100 } },
  });
}

describe('webhooks across instances', () => {
  it('the owner delivers its forest; once it goes, another instance takes the pending deliveries over', async () => {
    let healthy = false;
    const got: { id: string; phase: string }[] = [];
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        got.push({ id: String(req.headers['webhook-id']), phase: healthy ? 'after' : 'before' });
        res.statusCode = healthy ? 200 : 503;
        res.end();
      });
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;

    const a = await instance('A');
    const b = await instance('B');
    const sub = (await a.app.inject({ method: 'POST', url: '/v1/webhooks', payload: { url, events: ['turn.ended'] } })).json<{ id: string }>();
    const root = await createRoot(a.app);
    await send(a.app, root.id, 'hello');
    const step = await claim(a.app, root);
    await postOutput(a.app, root, step!.id, { content: 'done' });
    await until(() => got.length >= 2, 'A retrying its delivery', { timeoutMs: 5000 });
    const [first] = got;
    // B sees the subscription and the pending delivery, but A holds the forest: B leaves it alone.
    expect((await b.app.inject({ method: 'GET', url: `/v1/webhooks/${sub.id}/deliveries?state=pending` })).json()).toMatchObject({ items: [{ id: first!.id }] });
    const attemptsOf = async (h: Harness) => [...(await h.app.inject({ method: 'GET', url: '/metrics' })).body.matchAll(/^agentforest_webhook_deliveries_total\{outcome="\w+"\} (\d+)$/gm)].reduce((n, m) => n + Number(m[1]), 0);
    expect(await attemptsOf(a)).toBeGreaterThanOrEqual(2);
    expect(await attemptsOf(b)).toBe(0);
    // A goes: its worker stops and its leases are given up; then the receiver recovers.
    a.system.webhooks.stop();
    await a.close();
    healthy = true;
    await until(async () => (await b.app.inject({ method: 'GET', url: `/v1/webhooks/${sub.id}/deliveries?state=delivered` })).json<{ items: unknown[] }>().items.length === 1, 'B delivering it', { timeoutMs: 10_000 });
    expect(got.filter((g) => g.phase === 'after').map((g) => g.id)).toEqual([first!.id]);
    expect(new Set(got.map((g) => g.id))).toEqual(new Set([first!.id]));
    // B took it over: once A gave its leases up (inside a.close()), B may also have tried it
    // while the receiver still failed, before `healthy` was set; the one success was B's.
    expect(await attemptsOf(b)).toBeGreaterThanOrEqual(1);
    expect(await b.app.inject({ method: 'GET', url: '/metrics' }).then((r) => r.body)).toMatch(/^agentforest_webhook_deliveries_total\{outcome="delivered"\} 1$/m);
  });
});
