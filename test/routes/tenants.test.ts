/**
 * Tenants over the HTTP routes of one in-process instance: admin-only management, keys shown
 * once and refused once revoked, a tenant key acting for its own tenant only (its roots carry
 * its id, lists show its own, another tenant's agent is an unknown id), and a single-tenant
 * deployment untouched.
 */
import { describe, expect, it } from 'vitest';
import type { AddressInfo } from 'node:net';
import { createRoot, json, startHarness, until, type Harness } from '../fixtures/harness.js';
import { SseStream } from '../fixtures/sse.js';
import { startChild } from '../fixtures/forest.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';

const ADMIN = 'admin-key-for-tests';
const admin = { authorization: `Bearer ${ADMIN}` };

async function harness(): Promise<Harness> {
  const h = await startHarness({ operatorKey: ADMIN });
  closeWithTest(() => h.close());
  return h;
}

async function tenantWithKey(h: Harness, id: string, body: Record<string, unknown> = {}): Promise<{ authorization: string }> {
  const made = await h.app.inject({ method: 'POST', url: '/v1/tenants', headers: admin, payload: { id, ...body } });
  expect(made.statusCode, made.body).toBe(201);
  const key = await h.app.inject({ method: 'POST', url: `/v1/tenants/${id}/keys`, headers: admin });
  expect(key.statusCode, key.body).toBe(201);
  return { authorization: `Bearer ${json<{ key: string }>(key).key}` };
}

describe('tenants', () => {
  it('an admin makes a tenant and a key; the key is shown once and only its id is listed', async () => {
    const h = await harness();
    const made = await h.app.inject({ method: 'POST', url: '/v1/tenants', headers: admin, payload: { id: 'acme', name: 'Acme', quotas: { maxRoots: 3 } } });
    expect(made.statusCode).toBe(201);
    expect(json(made)).toMatchObject({ id: 'acme', name: 'Acme', quotas: { maxRoots: 3 } });
    const key = json<{ keyId: string; key: string }>(await h.app.inject({ method: 'POST', url: '/v1/tenants/acme/keys', headers: admin }));
    expect(key.key).toMatch(/^afk_[A-Za-z0-9_-]{43}$/);
    const keys = await h.app.inject({ method: 'GET', url: '/v1/tenants/acme/keys', headers: admin });
    expect(json(keys)).toEqual({ items: [{ keyId: key.keyId, createdAt: expect.any(String) }] });
    expect(keys.body).not.toContain(key.key);
    const again = await h.app.inject({ method: 'POST', url: '/v1/tenants', headers: admin, payload: { id: 'acme' } });
    expect([again.statusCode, json(again).code]).toEqual([409, 'TENANT_EXISTS']);
  });

  it('a tenant key may not manage tenants or packages (403), and a wrong or revoked one is 401', async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    for (const [method, url] of [['GET', '/v1/tenants'], ['POST', '/v1/tenants/acme/keys'], ['DELETE', '/v1/packages/subagent-report']] as const) {
      const res = await h.app.inject({ method, url, headers: acme });
      expect([res.statusCode, json(res).code], `${method} ${url}`).toEqual([403, 'UNAUTHORIZED']);
    }
    const wrong = await h.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: 'Bearer afk_nothing' } });
    expect([wrong.statusCode, json(wrong).code]).toEqual([401, 'UNAUTHENTICATED']);
    const keyId = json<{ items: { keyId: string }[] }>(await h.app.inject({ method: 'GET', url: '/v1/tenants/acme/keys', headers: admin })).items[0]!.keyId;
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents', headers: acme })).statusCode).toBe(200);
    const revoked = await h.app.inject({ method: 'DELETE', url: `/v1/tenants/acme/keys/${keyId}`, headers: admin });
    expect(revoked.statusCode).toBe(204);
    const refused = await h.app.inject({ method: 'GET', url: '/v1/agents', headers: acme });
    expect([refused.statusCode, json(refused).code]).toEqual([401, 'UNAUTHENTICATED']);
  });

  it("a tenant's roots carry its id; lists show each tenant its own and an admin all", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    await createRoot(h.app, { id: 'a1' }, acme);
    await createRoot(h.app, { id: 'g1' }, globex);
    await createRoot(h.app, { id: 'x1' }, admin);
    const ids = async (headers: Record<string, string>, query = '') =>
      json<{ items: { id: string; tenantId?: string }[] }>(await h.app.inject({ method: 'GET', url: `/v1/agents${query}`, headers })).items.map((a) => `${a.id}:${a.tenantId ?? '-'}`);
    expect(await ids(acme)).toEqual(['a1:acme']);
    expect(await ids(globex)).toEqual(['g1:globex']);
    expect((await ids(admin)).sort()).toEqual(['a1:acme', 'g1:globex', 'x1:-']);
    expect(await ids(admin, '?tenantId=acme')).toEqual(['a1:acme']);
    expect(await ids(globex, '?tenantId=acme')).toEqual([]);
  });

  it("another tenant's agent is answered as an unknown id, and nothing changes", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    await createRoot(h.app, { id: 'a1' }, acme);
    const foreign = await h.app.inject({ method: 'POST', url: '/v1/agents/a1/messages', headers: globex, payload: { content: 'hi', delivery: 'followup' } });
    const unknown = await h.app.inject({ method: 'POST', url: '/v1/agents/nobody/messages', headers: globex, payload: { content: 'hi', delivery: 'followup' } });
    expect(foreign.statusCode).toBe(404);
    const unknownBody = json<{ message: string }>(unknown);
    expect(json(foreign)).toEqual({ ...unknownBody, message: unknownBody.message.replace('nobody', 'a1') });
    const view = await h.app.inject({ method: 'GET', url: '/v1/agents/a1', headers: acme });
    expect(json(view)).toMatchObject({ id: 'a1', tenantId: 'acme', inbox: { queued: 0 } });
  });

  it('a tenant with live agents is not deleted; without, its keys go with it', async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    await createRoot(h.app, { id: 'a1' }, acme);
    const busy = await h.app.inject({ method: 'DELETE', url: '/v1/tenants/acme', headers: admin });
    expect([busy.statusCode, json(busy).code]).toEqual([409, 'TENANT_NOT_EMPTY']);
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/agents/a1', headers: acme })).statusCode).toBe(202);
    expect((await h.app.inject({ method: 'DELETE', url: '/v1/tenants/acme', headers: admin })).statusCode).toBe(204);
    const gone = await h.app.inject({ method: 'GET', url: '/v1/agents', headers: acme });
    expect(gone.statusCode).toBe(401);
  });

  it("a tenant's view shows what it uses now; /metrics shows a tenant key its own series alone", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    await createRoot(h.app, { id: 'a1' }, acme);
    await createRoot(h.app, { id: 'a2' }, acme);
    await createRoot(h.app, { id: 'g1' }, globex);
    const view = json(await h.app.inject({ method: 'GET', url: '/v1/tenants/acme', headers: admin }));
    expect(view).toMatchObject({ id: 'acme', usage: { liveAgents: 2, liveRoots: 2, steps: 0, tokens: 0, costMicroUsd: 0 } });
    const mine = await h.app.inject({ method: 'GET', url: '/metrics', headers: acme });
    expect(mine.statusCode).toBe(200);
    expect(mine.body).toContain('agentforest_tenant_live_agents{tenant="acme"} 2');
    expect(mine.body).not.toContain('globex');
    expect(mine.body).not.toContain('agentforest_http_');
    const all = await h.app.inject({ method: 'GET', url: '/metrics', headers: admin });
    expect(all.body).toContain('agentforest_tenant_live_agents{tenant="globex"} 1');
    expect(all.body).toContain('agentforest_tenant_live_agents{tenant="acme"} 2');
  });

  it('two tenants using one idempotency key on their own roots do not meet', async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    await createRoot(h.app, { id: 'a1' }, acme);
    await createRoot(h.app, { id: 'g1' }, globex);
    const sendWithKey = (id: string, headers: Record<string, string>, content: string) =>
      h.app.inject({ method: 'POST', url: `/v1/agents/${id}/messages`, headers: { ...headers, 'idempotency-key': 'same-key' }, payload: { content, delivery: 'followup' } });
    const first = await sendWithKey('a1', acme, 'for acme');
    const second = await sendWithKey('g1', globex, 'for globex');
    expect([first.statusCode, second.statusCode]).toEqual([202, 202]);
    expect(json(second).messageId).not.toBe(json(first).messageId);
    expect(second.headers['idempotent-replayed']).toBeUndefined();
  });

  it('a revoked key ends what is open with it: its event stream, and a long-poll for a step', async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    await createRoot(h.app, { id: 'a1' }, acme);
    await h.app.listen({ host: '127.0.0.1', port: 0 });
    const address = h.app.server.address() as AddressInfo;
    const base = `http://127.0.0.1:${address.port}`;
    const stream = await SseStream.open(`${base}/v1/agents/a1/events`, acme);
    const poll = fetch(`${base}/v1/steps/next`, { method: 'POST', headers: { ...acme, 'content-type': 'application/json' }, body: JSON.stringify({ waitMs: 30_000 }) });
    await until(async () => h.system.dispatcher.waiting === 1, 'the long-poll to wait');
    const keyId = json<{ items: { keyId: string }[] }>(await h.app.inject({ method: 'GET', url: '/v1/tenants/acme/keys', headers: admin })).items[0]!.keyId;
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/tenants/acme/keys/${keyId}`, headers: admin })).statusCode).toBe(204);
    await stream.waitForEnd('the revoked key\'s stream to end');
    expect((await poll).status).toBe(204);
    // Work that comes afterwards is not handed to it.
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents/a1/messages', headers: admin, payload: { content: 'later', delivery: 'followup' } })).statusCode).toBe(202);
    expect(h.system.dispatcher.waiting).toBe(0);
  });

  it("an agent's control tools answer another tenant's agent as an unknown one", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    const parent = await createRoot(h.app, { id: 'a1' }, acme);
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents/a1/messages', headers: acme, payload: { content: 'go', delivery: 'followup' } })).statusCode).toBe(202);
    await startChild(h, parent);
    const theirs = await createRoot(h.app, { id: 'g1' }, globex);
    expect((await h.app.inject({ method: 'POST', url: '/v1/agents/g1/messages', headers: globex, payload: { content: 'go', delivery: 'followup' } })).statusCode).toBe(202);
    const theirChild = await startChild(h, theirs);
    const call = (name: string, input: Record<string, unknown>) =>
      h.app.inject({ method: 'POST', url: '/v1/agents/a1/tool-calls', headers: { ...acme, 'x-agent-token': parent.token }, payload: { name, input } });
    for (const id of [theirChild.id, 'nobody-0']) {
      const interrupt = await call('interrupt_agent', { agent_id: id });
      expect(json<{ isError: boolean; output?: unknown }>(interrupt), id).toMatchObject({ isError: false, output: { accepted: false } });
    }
    const foreign = await call('send_message', { subagent_id: theirChild.id, message: 'hi' });
    const unknown = await call('send_message', { subagent_id: 'nobody-0', message: 'hi' });
    expect(foreign.statusCode).toBe(unknown.statusCode);
    expect(foreign.body).toBe(unknown.body.replaceAll('nobody-0', theirChild.id));
  });

  it("a HEAD is judged as its GET: another tenant's agent is unknown, an admin route refused", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    await createRoot(h.app, { id: 'a1' }, acme);
    for (const url of ['/v1/agents/a1', '/v1/agents/a1/session', '/v1/agents/a1/usage']) {
      expect((await h.app.inject({ method: 'HEAD', url, headers: globex })).statusCode, url).toBe(404);
      expect((await h.app.inject({ method: 'HEAD', url, headers: acme })).statusCode, url).toBe(200);
    }
    expect((await h.app.inject({ method: 'HEAD', url: '/v1/tenants', headers: acme })).statusCode).toBe(403);
  });

  it('an admin key that looks like a tenant key is still an admin key', async () => {
    const h = await startHarness({ apiKeys: ['afk_an-admin-key-that-looks-like-a-tenant-key'] });
    closeWithTest(() => h.close());
    const res = await h.app.inject({ method: 'GET', url: '/v1/tenants', headers: { authorization: 'Bearer afk_an-admin-key-that-looks-like-a-tenant-key' } });
    expect(res.statusCode).toBe(200);
  });
});

describe('tenants without an admin key', () => {
  it('are refused: without one, a request without a key would act as an admin', async () => {
    const h = await startHarness();
    closeWithTest(() => h.close());
    const res = await h.app.inject({ method: 'POST', url: '/v1/tenants', payload: { id: 'acme' } });
    expect([res.statusCode, json(res).code]).toEqual([403, 'UNAUTHORIZED']);
    expect(json(await h.app.inject({ method: 'GET', url: '/v1/tenants' }))).toEqual({ items: [] });
  });

  it('made while an admin key was set, they make a keyless request refused once the key is gone', async () => {
    const store = new MemorySessionStore();
    const at = new Date().toISOString();
    await store.write({ headers: [], entries: [], settings: [{ op: 'put', setting: { kind: 'tenant', name: 'acme', value: { id: 'acme', createdAt: at, updatedAt: at }, updatedAt: at } }] });
    const h = await startHarness({ store });
    closeWithTest(() => h.close());
    const res = await h.app.inject({ method: 'GET', url: '/v1/agents' });
    expect([res.statusCode, json(res).code]).toEqual([401, 'UNAUTHENTICATED']);
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents', headers: { authorization: 'Bearer something' } })).statusCode).toBe(401);
  });
});
