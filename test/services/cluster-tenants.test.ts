/**
 * Tenants with several instances: two instances (two Systems with their own stores and instance
 * ids) on one fresh PostgreSQL database. A key revoked on one is refused on the other within
 * the settings' bound (the database's notification brings it at once; the test's follow period
 * is an hour, so only the notification can); a quota changed on one holds on the other; count
 * and time quotas hold across both within the sharing bound (each publishes every half second).
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { openClusterStore } from '../../src/composition/open-store.js';
import { clockOf, type Clock } from '../../src/domain/ports.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { createRoot, json, postOutput, send, startHarness, until, type Harness } from '../fixtures/harness.js';
import { nextStep } from '../fixtures/forest.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';

let db: TestDatabase;

beforeEach(async () => {
  db = await freshDatabase();
  closeWithTest(() => db.dispose());
});

/** A follow period no test waits for: a change reaches the other instance by the notification alone. */
const HOUR = 3_600_000;
/** Within the bound and a margin for a loaded machine. */
const BOUND = { timeoutMs: 10_000 };

async function instance(id: string, clock?: Clock): Promise<Harness> {
  const { store, cluster } = await openClusterStore(db.url, { instanceId: id, leaseMs: 60_000, confirmMs: 5_000 });
  return startHarness({ store, cluster, url: `http://${id.toLowerCase()}`, settingsFollowMs: HOUR, operatorKey: 'cluster-tenants-admin-key', ...(clock === undefined ? {} : { clock }) });
}

async function tenantWithKey(h: Harness, id: string, quotas: Record<string, number> = {}): Promise<{ headers: Record<string, string>; keyId: string }> {
  expect((await h.app.inject({ method: 'POST', url: '/v1/tenants', payload: { id, quotas } })).statusCode).toBe(201);
  const key = json<{ key: string; keyId: string }>(await h.app.inject({ method: 'POST', url: `/v1/tenants/${id}/keys` }));
  return { headers: { authorization: `Bearer ${key.key}` }, keyId: key.keyId };
}

const status = async (h: Harness, headers: Record<string, string>) => (await h.app.inject({ method: 'GET', url: '/v1/agents', headers })).statusCode;

describe('tenants with several instances', () => {
  it('a key revoked on one instance is refused on the other within the bound', async () => {
    const a = await instance('A');
    const b = await instance('B');
    const acme = await tenantWithKey(a, 'acme');
    await until(async () => (await status(b, acme.headers)) === 200, 'instance B to know the key', BOUND);
    expect((await a.app.inject({ method: 'DELETE', url: `/v1/tenants/acme/keys/${acme.keyId}` })).statusCode).toBe(204);
    expect(await status(a, acme.headers)).toBe(401);
    await until(async () => (await status(b, acme.headers)) === 401, 'instance B to refuse the revoked key', BOUND);
  });

  it('maxLiveAgents holds across the instances: a root on one counts on the other', async () => {
    const a = await instance('A');
    const b = await instance('B');
    const acme = await tenantWithKey(a, 'acme', { maxLiveAgents: 1 });
    await until(async () => (await status(b, acme.headers)) === 200, 'instance B to know the tenant', BOUND);
    await createRoot(a.app, { id: 'a1' }, acme.headers);
    await until(async () => json<{ usage: { liveAgents: number } }>(await b.app.inject({ method: 'GET', url: '/v1/tenants/acme' })).usage.liveAgents === 1, "instance B to learn of A's root", BOUND);
    const over = await b.app.inject({ method: 'POST', url: '/v1/agents', headers: acme.headers, payload: { id: 'b1' } });
    expect([over.statusCode, json<{ code: string }>(over).code]).toEqual([429, 'QUOTA_EXCEEDED']);
    // Raised on B, it holds on A too.
    expect((await b.app.inject({ method: 'PATCH', url: '/v1/tenants/acme', payload: { quotas: { maxLiveAgents: 2 } } })).statusCode).toBe(200);
    await until(async () => json<{ quotas?: { maxLiveAgents?: number } }>(await a.app.inject({ method: 'GET', url: '/v1/tenants/acme' })).quotas?.maxLiveAgents === 2, 'instance A to follow the change', BOUND);
    await createRoot(a.app, { id: 'a2' }, acme.headers);
  });

  it("tokensPerDay holds across the instances: what one spent stops the other's next step", async () => {
    // Noon UTC for both: the day does not turn during the test.
    const noon = clockOf(() => Date.UTC(2026, 11, 7, 12, 0, 0));
    const a = await instance('A', noon);
    const b = await instance('B', noon);
    const acme = await tenantWithKey(a, 'acme', { tokensPerDay: 100 });
    await until(async () => (await status(b, acme.headers)) === 200, 'instance B to know the tenant', BOUND);
    const spender = await createRoot(a.app, { id: 'a1' }, acme.headers);
    expect((await send(a.app, 'a1', 'work')).statusCode).toBe(202);
    const step = await nextStep(a, spender);
    const usage = { promptTokens: 100, completionTokens: 50, totalTokens: 150 };
    expect(json(await postOutput(a.app, spender, step.id, { content: 'done', usage }))).toMatchObject({ turn: 'ended' });
    await until(async () => json<{ usage: { tokens: number } }>(await b.app.inject({ method: 'GET', url: '/v1/tenants/acme' })).usage.tokens === 150, "instance B to learn of A's tokens", BOUND);
    const other = await createRoot(b.app, { id: 'b1' }, acme.headers);
    expect((await send(b.app, 'b1', 'work')).statusCode).toBe(202);
    const refused = await b.app.inject({ method: 'POST', url: '/v1/agents/b1/steps/next', headers: { 'x-agent-token': other.token }, payload: {} });
    expect([refused.statusCode, json<{ code: string }>(refused).code]).toEqual([429, 'QUOTA_EXCEEDED']);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
  });

  it("a request naming another tenant's forest in its body or query is answered where it lands, as one naming no forest", async () => {
    const a = await instance('A');
    const b = await instance('B');
    const acme = await tenantWithKey(a, 'acme');
    const globex = await tenantWithKey(a, 'globex');
    await until(async () => (await status(b, globex.headers)) === 200, 'instance B to know the tenants', BOUND);
    await createRoot(a.app, { id: 'a-root' }, acme.headers);
    const redirect = { ...globex.headers, prefer: 'redirect' };
    for (const rootId of ['a-root', 'nobody-0']) {
      const claim = await b.app.inject({ method: 'POST', url: '/v1/steps/next', headers: redirect, payload: { rootId } });
      expect([claim.statusCode, claim.headers.location], rootId).toEqual([204, undefined]);
      const list = await b.app.inject({ method: 'GET', url: `/v1/agents?parentId=${rootId}`, headers: redirect });
      expect([list.statusCode, json(list)], rootId).toEqual([200, { items: [], nextCursor: null }]);
    }
  });
});
