/**
 * Webhook subscriptions of tenants, over the app with real receivers on loopback, in every
 * store (the store matches events to subscriptions): a subscription made with a tenant key is
 * the tenant's and is sent only its own forests' events (children's included), naming another
 * tenant's root or not; one made with an admin key is global and is sent every forest's; a
 * tenant lists its own subscriptions only, and another tenant's or a global one is an unknown id.
 * A tenant's subscription is held to the address guard, on subscription and at every delivery,
 * whatever AGENTFOREST_WEBHOOK_ALLOW_PRIVATE says: that setting is an admin's.
 *
 * A delivery row is made in the transaction that commits its event, so once the turn that
 * caused an event is answered, a subscription's delivery list says for good whether it matched.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import { PostgresSessionStore } from '../../src/adapters/postgres/postgres-store.js';
import { SqliteSessionStore } from '../../src/adapters/sqlite/sqlite-store.js';
import { generateSecret } from '../../src/observation/webhooks/signing.js';
import type { SessionStore } from '../../src/sessions/session-store.js';
import { closeWithTest, tempDir } from '../fixtures/cleanup.js';
import { createRoot, json, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { freshDatabase } from '../fixtures/postgres.js';

const ADMIN = 'admin-key-for-tests';
const admin = { authorization: `Bearer ${ADMIN}` };
type Key = { authorization: string };

/** Private addresses allowed to admins (AGENTFOREST_WEBHOOK_ALLOW_PRIVATE) and, as no deployment can, to tenants: the receivers are on loopback. */
const FAST = { allowPrivate: true, tenantPrivateAddresses: true, pollMs: 20, backoff: { baseMs: 20, maxMs: 200 } };
/** As a deployment allowing private addresses is: to its admins only. */
const ADMIN_PRIVATE = { ...FAST, tenantPrivateAddresses: false };
const DELIVERED = { timeoutMs: 5000 };

/** Each store, fresh; the harness closes it, and what it leaves (a file, a database) goes after. */
const STORES: { name: string; open(): Promise<SessionStore> }[] = [
  { name: 'memory', open: async () => new MemorySessionStore() },
  { name: 'sqlite', open: async () => new SqliteSessionStore({ path: join(tempDir(), 'sessions.db') }) },
  {
    name: 'postgres',
    async open() {
      const db = await freshDatabase();
      closeWithTest(() => db.dispose());
      return PostgresSessionStore.open({ url: db.url });
    },
  },
];

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => { s.closeAllConnections(); s.close(r); })));
});

interface Receiver {
  url: string;
  /** The payloads received, parsed. */
  received: { type: string; data: { rootId: string; agentId?: string; from?: string } }[];
}

/** A receiver on 127.0.0.1 that records every payload and answers 200. */
async function receiver(): Promise<Receiver> {
  const received: Receiver['received'] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push(JSON.parse(Buffer.concat(chunks).toString('utf8')) as Receiver['received'][number]);
      res.end('ok');
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, received };
}

async function harness(store?: SessionStore, webhooks: typeof FAST = FAST): Promise<Harness> {
  return startHarness({ apiKeys: [ADMIN], webhooks, ...(store === undefined ? {} : { store }) });
}

async function tenantWithKey(h: Harness, id: string): Promise<Key> {
  expect((await h.app.inject({ method: 'POST', url: '/v1/tenants', headers: admin, payload: { id } })).statusCode).toBe(201);
  const key = await h.app.inject({ method: 'POST', url: `/v1/tenants/${id}/keys`, headers: admin });
  expect(key.statusCode, key.body).toBe(201);
  return { authorization: `Bearer ${json<{ key: string }>(key).key}` };
}

async function subscribe(h: Harness, key: Key, url: string, more: Record<string, unknown> = {}): Promise<{ id: string; tenantId?: string }> {
  const res = await h.app.inject({ method: 'POST', url: '/v1/webhooks', headers: key, payload: { url, events: ['turn.ended', 'report.delivered'], ...more } });
  expect(res.statusCode, res.body).toBe(201);
  return json(res);
}

/** One turn of `agent` to its end: a message, a claimed step, an output (answered once durable). */
async function oneTurn(h: Harness, key: Key, agent: CreatedRoot): Promise<void> {
  const sent = await h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/messages`, headers: key, payload: { content: 'hello', delivery: 'followup' } });
  expect(sent.statusCode, sent.body).toBe(202);
  const claimed = await h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/steps/next`, headers: { ...key, 'x-agent-token': agent.token }, payload: { waitMs: 0 } });
  expect(claimed.statusCode, claimed.body).toBe(200);
  const stepId = json<{ step: { id: string } }>(claimed).step.id;
  const output = await h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/steps/${stepId}/output`, headers: { ...key, 'x-agent-token': agent.token }, payload: { content: 'done' } });
  expect(output.statusCode, output.body).toBe(200);
}

/** A continuable child of `parent` that reports at once: a `report.delivered` event of the parent's forest. */
async function childReports(h: Harness, key: Key, parent: CreatedRoot): Promise<string> {
  const started = await h.app.inject({
    method: 'POST',
    url: `/v1/agents/${parent.id}/children`,
    headers: { ...key, 'x-agent-token': parent.token },
    payload: { mode: 'continuable', prompt: 'child task' },
  });
  expect(started.statusCode, started.body).toBe(201);
  const child = json<{ agent: { id: string }; agentToken: string }>(started);
  const reported = await h.app.inject({
    method: 'POST',
    url: `/v1/agents/${child.agent.id}/tool-calls`,
    headers: { ...key, 'x-agent-token': child.agentToken },
    payload: { name: 'report', input: { output: 'found it' } },
  });
  expect(reported.statusCode, reported.body).toBe(200);
  return child.agent.id;
}

/** `type:rootId` of each of a subscription's deliveries, sorted (the store's rows, as the API lists them). */
async function deliveries(h: Harness, key: Key, webhookId: string): Promise<string[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/webhooks/${webhookId}/deliveries`, headers: key });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ items: { type: string; rootId: string }[] }>(res).items.map((d) => `${d.type}:${d.rootId}`).sort();
}

const received = (hook: Receiver): string[] => hook.received.map((p) => `${p.type}:${p.data.rootId}`).sort();

for (const store of STORES) describe(`tenant webhook delivery (${store.name})`, () => {
  it("sends each tenant's subscription only its own forests' events, children's included, and a global one every forest's", async () => {
    const h = await harness(await store.open());
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    const [acmeHook, globexHook, globalHook] = [await receiver(), await receiver(), await receiver()];
    const acmeSub = await subscribe(h, acme, acmeHook.url);
    const globexSub = await subscribe(h, globex, globexHook.url);
    const globalSub = await subscribe(h, admin, globalHook.url);
    const a1 = await createRoot(h.app, { id: 'a1' }, acme);
    const g1 = await createRoot(h.app, { id: 'g1' }, globex);
    const x1 = await createRoot(h.app, { id: 'x1' }, admin);
    await oneTurn(h, acme, a1);
    await childReports(h, acme, a1);
    await oneTurn(h, globex, g1);
    await oneTurn(h, admin, x1);

    expect(await deliveries(h, acme, acmeSub.id)).toEqual(['report.delivered:a1', 'turn.ended:a1']);
    expect(await deliveries(h, globex, globexSub.id)).toEqual(['turn.ended:g1']);
    expect(await deliveries(h, admin, globalSub.id)).toEqual(['report.delivered:a1', 'turn.ended:a1', 'turn.ended:g1', 'turn.ended:x1']);
    await until(() => acmeHook.received.length === 2 && globexHook.received.length === 1 && globalHook.received.length === 4, 'every delivery sent', DELIVERED);
    expect(received(acmeHook)).toEqual(['report.delivered:a1', 'turn.ended:a1']);
    expect(received(globexHook)).toEqual(['turn.ended:g1']);
    expect(received(globalHook)).toEqual(['report.delivered:a1', 'turn.ended:a1', 'turn.ended:g1', 'turn.ended:x1']);
  });

  it("never sends a tenant's subscription naming another tenant's root that forest's events, and accepts it as it accepts an unknown root", async () => {
    const h = await harness(await store.open());
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    const [acmeHook, spyHook] = [await receiver(), await receiver()];
    const a1 = await createRoot(h.app, { id: 'a1' }, acme);
    const spy = await subscribe(h, globex, spyHook.url, { rootId: 'a1' });
    const unknown = await subscribe(h, globex, spyHook.url, { rootId: 'nobody' });
    expect([spy.tenantId, unknown.tenantId]).toEqual(['globex', 'globex']);
    const own = await subscribe(h, acme, acmeHook.url, { rootId: 'a1' });
    await oneTurn(h, acme, a1);
    await childReports(h, acme, a1);

    expect(await deliveries(h, acme, own.id)).toEqual(['report.delivered:a1', 'turn.ended:a1']);
    expect(await deliveries(h, globex, spy.id)).toEqual([]);
    await until(() => acmeHook.received.length === 2, "acme's deliveries sent", DELIVERED);
    expect(spyHook.received).toEqual([]);
  });
});

describe('tenant webhook subscriptions', () => {
  it("belong to the tenant whose key made them (tenantId in the view); an admin's are global (no tenantId)", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const made = await h.app.inject({ method: 'POST', url: '/v1/webhooks', headers: acme, payload: { url: 'http://127.0.0.1:9/a', events: ['turn.ended'] } });
    expect(Object.keys(json(made)).sort()).toEqual(['events', 'id', 'rootId', 'secret', 'tenantId', 'url']);
    expect(json(made)).toMatchObject({ tenantId: 'acme', rootId: null });
    const global = await subscribe(h, admin, 'http://127.0.0.1:9/g');
    expect(global).not.toHaveProperty('tenantId');
    const view = await h.app.inject({ method: 'GET', url: `/v1/webhooks/${json<{ id: string }>(made).id}`, headers: acme });
    expect(json(view)).toMatchObject({ id: json<{ id: string }>(made).id, tenantId: 'acme' });
    await expect(h.system.webhooks.subscriptions.ownerOf(json<{ id: string }>(made).id)).resolves.toEqual({ owner: 'acme' });
    await expect(h.system.webhooks.subscriptions.ownerOf(global.id)).resolves.toEqual({});
    await expect(h.system.webhooks.subscriptions.ownerOf('webhook-none')).resolves.toBeUndefined();
  });

  it('lists each tenant its own subscriptions only, and an admin every one', async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    const a = await subscribe(h, acme, 'http://127.0.0.1:9/a');
    const g = await subscribe(h, globex, 'http://127.0.0.1:9/g');
    const x = await subscribe(h, admin, 'http://127.0.0.1:9/x');
    const listed = async (key: Key) =>
      json<{ items: { id: string; tenantId?: string }[] }>(await h.app.inject({ method: 'GET', url: '/v1/webhooks', headers: key })).items.map((s) => `${s.id}:${s.tenantId ?? '-'}`);
    expect(await listed(acme)).toEqual([`${a.id}:acme`]);
    expect(await listed(globex)).toEqual([`${g.id}:globex`]);
    expect((await listed(admin)).sort()).toEqual([`${a.id}:acme`, `${g.id}:globex`, `${x.id}:-`].sort());
  });

  it("answers another tenant's subscription and a global one to a tenant as an unknown id, and changes nothing", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    const a = await subscribe(h, acme, 'http://127.0.0.1:9/a');
    const x = await subscribe(h, admin, 'http://127.0.0.1:9/x');
    const unknown = await h.app.inject({ method: 'DELETE', url: '/v1/webhooks/webhook-none', headers: globex });
    expect(unknown.statusCode).toBe(404);
    for (const id of [a.id, x.id]) {
      const res = await h.app.inject({ method: 'DELETE', url: `/v1/webhooks/${id}`, headers: globex });
      expect(res.statusCode).toBe(404);
      expect(json(res)).toEqual({ ...json(unknown), message: json<{ message: string }>(unknown).message.replace('webhook-none', id) });
    }
    const all = json<{ items: { id: string }[] }>(await h.app.inject({ method: 'GET', url: '/v1/webhooks', headers: admin })).items.map((s) => s.id);
    expect(all.sort()).toEqual([a.id, x.id].sort());
  });
});

describe("a tenant's webhook URL passes the address guard whatever AGENTFOREST_WEBHOOK_ALLOW_PRIVATE says", () => {
  it('a tenant key subscribing a loopback, private or link-local URL is refused 400 where private addresses are allowed; an admin key may', async () => {
    const h = await harness(undefined, ADMIN_PRIVATE);
    const acme = await tenantWithKey(h, 'acme');
    const hook = await receiver();
    const port = new URL(hook.url).port;
    for (const url of [hook.url, `http://localhost:${port}/hook`, `http://[::1]:${port}/hook`, 'http://10.1.2.3/hook', 'http://169.254.169.254/latest', 'http://192.0.2.1/hook']) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/webhooks', headers: acme, payload: { url, events: ['turn.ended'] } });
      expect([res.statusCode, json(res).code], url).toEqual([400, 'VALIDATION']);
      expect(json<{ message: string }>(res).message, url).toMatch(/private address/);
    }
    expect(json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: '/v1/webhooks', headers: admin })).items).toEqual([]);
    expect(await subscribe(h, admin, hook.url)).not.toHaveProperty('tenantId');
  });

  it("a tenant's subscription stored at a loopback address is never sent there, while an admin's to the same receiver is", async () => {
    const h = await harness(undefined, ADMIN_PRIVATE);
    const acme = await tenantWithKey(h, 'acme');
    const hook = await receiver();
    const global = await subscribe(h, admin, hook.url);
    // As if its host resolved to a public address when it subscribed, and to loopback now.
    const webhookId = 'webhook-acme-moved';
    h.system.log.changeWebhooks({ op: 'subscribe', subscription: { id: webhookId, url: hook.url, events: ['turn.ended'], rootId: null, tenantId: 'acme', secret: generateSecret(), createdAt: Date.now() } });
    await h.system.log.durable();
    const a1 = await createRoot(h.app, { id: 'a1' }, acme);
    await oneTurn(h, acme, a1);

    const state = async (key: Key, id: string) => json<{ items: { state: string; lastError: string | null }[] }>(await h.app.inject({ method: 'GET', url: `/v1/webhooks/${id}/deliveries`, headers: key })).items;
    await until(async () => (await state(acme, webhookId))[0]?.state === 'failed', "the tenant's delivery given up", DELIVERED);
    expect((await state(acme, webhookId))[0]!.lastError).toMatch(/^address: .*private address/);
    await until(async () => (await state(admin, global.id))[0]?.state === 'delivered', "the admin's delivery sent", DELIVERED);
    expect(received(hook)).toEqual(['turn.ended:a1']);
  });
});
