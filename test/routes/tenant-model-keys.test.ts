/**
 * Model keys per tenant: a variable given to a tenant (its modelKeyEnvs) is named by that
 * tenant's agents alone; another tenant's agent, or an admin's, naming it is refused; a
 * tenant's agent names the deployment's own keys only where AGENTFOREST_MODEL_BASE_URLS keeps
 * them to the operator's endpoints; a variable is given to one tenant at most.
 */
import { describe, expect, it } from 'vitest';
import { json, startHarness, type Harness, type HarnessOptions } from '../fixtures/harness.js';

const ENV = { ACME_API_KEY: 'acme-secret', OPENAI_API_KEY: 'operator-secret' };
const model = (apiKeyEnv: string) => ({ provider: 'openai-compatible', baseUrl: 'https://models.example/v1', model: 'm', apiKeyEnv });

async function harness(options: HarnessOptions = {}): Promise<Harness> {
  // Tenants need an admin key: every request of the test sends it unless it names a tenant's.
  return startHarness({ operatorKey: 'model-key-tests-admin-key', driver: { env: ENV }, ...options });
}

async function tenant(h: Harness, id: string, body: Record<string, unknown> = {}): Promise<Record<string, string>> {
  const made = await h.app.inject({ method: 'POST', url: '/v1/tenants', payload: { id, ...body } });
  expect(made.statusCode, made.body).toBe(201);
  return { authorization: `Bearer ${json<{ key: string }>(await h.app.inject({ method: 'POST', url: `/v1/tenants/${id}/keys` })).key}` };
}

function create(h: Harness, headers: Record<string, string>, apiKeyEnv: string) {
  return h.app.inject({ method: 'POST', url: '/v1/agents', headers, payload: { model: model(apiKeyEnv) } });
}

describe('model keys per tenant', () => {
  it("a tenant's agents name its keys; another tenant's or an admin's agent naming them is refused", async () => {
    const h = await harness();
    const acme = await tenant(h, 'acme', { modelKeyEnvs: ['ACME_API_KEY'] });
    const globex = await tenant(h, 'globex');
    expect((await create(h, acme, 'ACME_API_KEY')).statusCode).toBe(201);
    for (const headers of [globex, {}]) {
      const refused = await create(h, headers, 'ACME_API_KEY');
      expect(refused.statusCode).toBe(400);
      expect(json<{ code: string; message: string }>(refused)).toMatchObject({ code: 'VALIDATION', message: expect.stringContaining('ACME_API_KEY') });
    }
  });

  it("a tenant's agent names the deployment's keys only where the endpoints are the operator's", async () => {
    const open = await harness();
    const acme = await tenant(open, 'acme');
    expect((await create(open, acme, 'OPENAI_API_KEY')).statusCode).toBe(400);
    expect((await create(open, {}, 'OPENAI_API_KEY')).statusCode).toBe(201);
    const kept = await harness({ modelPolicy: { baseUrls: ['https://models.example/v1'] } });
    const acmeKept = await tenant(kept, 'acme');
    expect((await create(kept, acmeKept, 'OPENAI_API_KEY')).statusCode).toBe(201);
  });

  it('a key variable is given to one tenant at most', async () => {
    const h = await harness();
    await tenant(h, 'acme', { modelKeyEnvs: ['ACME_API_KEY'] });
    const second = await h.app.inject({ method: 'POST', url: '/v1/tenants', payload: { id: 'globex', modelKeyEnvs: ['ACME_API_KEY'] } });
    expect(second.statusCode).toBe(400);
    expect(json<{ message: string }>(second).message).toContain('acme');
    expect((await h.app.inject({ method: 'GET', url: '/v1/tenants/globex' })).statusCode).toBe(404);
  });

  it('only model key names may be given: never another variable of the service', async () => {
    const h = await harness();
    for (const name of ['DATABASE_URL', 'AGENTFOREST_API_KEYS', 'AGENTFOREST_SECRET_API_KEY']) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/tenants', payload: { id: 'acme', modelKeyEnvs: [name] } });
      expect([res.statusCode, json<{ code: string }>(res).code], name).toEqual([400, 'VALIDATION']);
    }
  });

  it("a tenant's tool server may not name the deployment's keys or another tenant's as header secrets", async () => {
    const h = await harness();
    await tenant(h, 'acme', { modelKeyEnvs: ['ACME_API_KEY'] });
    const globex = await tenant(h, 'globex');
    for (const env of ['OPENAI_API_KEY', 'ACME_API_KEY']) {
      const res = await h.app.inject({
        method: 'PUT',
        url: '/v1/tool-servers/crm',
        headers: globex,
        payload: { url: 'https://tools.example/mcp', headers: { authorization: { env } } },
      });
      expect(res.statusCode, env).toBe(400);
      expect(json<{ code: string; message: string }>(res)).toMatchObject({ code: 'VALIDATION', message: expect.stringContaining(env) });
    }
    expect(json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: '/v1/tool-servers' })).items).toEqual([]);
  });
});
