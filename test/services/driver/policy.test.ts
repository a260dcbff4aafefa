/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts).
 * The model policy: checked again before every request, and `model` validated at creation
 * (key variables, endpoints, fields, normalised base URLs, the parent token first).
 */
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { ModelSpec } from '../../../src/contract/index.js';
import { call, lastMessage } from '../../../demo/scripted-model.js';
import {
  accepted,
  answer,
  childrenOf,
  DRIVER_WAIT,
  followup,
  header,
  isChild,
  picture,
  spec,
  start,
  turnEnded,
  view,
  type AgentView,
  type ErrorBody,
} from '../../fixtures/driver.js';
import { createRoot, session, until, type Harness } from '../../fixtures/harness.js';
import { startModelServer } from '../../fixtures/model-server.js';

describe('the built-in model driver', { timeout: 20_000 }, () => {
  it('checks the model policy again before every request: a key variable removed since creation fails the next turn', async () => {
    const env: Record<string, string | undefined> = { DEMO_API_KEY: 'sk-first' };
    const h = await start({ driver: { env } });
    const model = await startModelServer((req) => answer(`re: ${lastMessage(req)!.content ?? ''}`));
    const root = await createRoot(h.app, { model: spec(model, { apiKeyEnv: 'DEMO_API_KEY' }) });
    accepted(await followup(h, root.id, 'one'));
    expect(picture(await turnEnded(h, root.id)).slice(-2)).toEqual(['assistant:re: one', 'turn-end:completed']);

    // The policy reads the same env object: the variable is gone before the next turn.
    delete env.DEMO_API_KEY;
    accepted(await followup(h, root.id, 'two'));
    const log = await turnEnded(h, root.id, 2);
    expect(picture(log.slice(5))).toEqual(['turn-start', 'user:two', 'turn-end:failed']);
    expect(log[7]!.error).toBe('the agent\'s model is no longer permitted: model.apiKeyEnv "DEMO_API_KEY" is not set in the service\'s environment');
    expect(model.requests).toHaveLength(1);

    // Set again (another value): the next turn is driven with it.
    env.DEMO_API_KEY = 'sk-second';
    accepted(await followup(h, root.id, 'three'));
    expect(picture(await turnEnded(h, root.id, 3)).slice(-2)).toEqual(['assistant:re: three', 'turn-end:completed']);
    expect(model.requests.map((r) => r.authorization)).toEqual(['Bearer sk-first', 'Bearer sk-second']);
    expect(JSON.stringify(await session(h.app, root.id))).not.toContain('sk-');
  });

  describe('validating `model` at creation', () => {
    const create = (h: Harness, model: object): Promise<LightMyRequestResponse> =>
      h.app.inject({ method: 'POST', url: '/v1/agents', payload: { model } });

    it('refuses key variables, endpoints and fields it may not use', async () => {
      const env = { DEMO_API_KEY: 'sk-test', AGENTFOREST_API_KEY: 'operator-secret', PATH: '/usr/bin' };
      const h = await start({ driver: { env } });
      const base = { provider: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', model: 'm' };
      const cases: [string, Record<string, unknown>, RegExp][] = [
        ['an AGENTFOREST_ variable', { ...base, apiKeyEnv: 'AGENTFOREST_API_KEY' }, /^model\.apiKeyEnv "AGENTFOREST_API_KEY" is not a variable this service lends as an API key/],
        ['the operator key list', { ...base, apiKeyEnv: 'AGENTFOREST_API_KEYS' }, /^model\.apiKeyEnv "AGENTFOREST_API_KEYS" is not a variable this service lends/],
        ['PATH', { ...base, apiKeyEnv: 'PATH' }, /^model\.apiKeyEnv "PATH" is not a variable this service lends/],
        ['an unset variable', { ...base, apiKeyEnv: 'OTHER_API_KEY' }, /^model\.apiKeyEnv "OTHER_API_KEY" is not set in the service's environment$/],
        ['a query', { ...base, baseUrl: 'http://127.0.0.1:9/v1?key=sk-1' }, /must not carry credentials, a query or a fragment/],
        ['credentials', { ...base, baseUrl: 'http://user:pw@127.0.0.1:9/v1' }, /must not carry credentials, a query or a fragment/],
        ['a fragment', { ...base, baseUrl: 'http://127.0.0.1:9/v1#x' }, /must not carry credentials, a query or a fragment/],
        ['an empty query', { ...base, baseUrl: 'http://127.0.0.1:9/v1?' }, /^model\.baseUrl must not carry credentials, a query or a fragment/],
        ['an empty fragment', { ...base, baseUrl: 'http://127.0.0.1:9/v1#' }, /^model\.baseUrl must not carry credentials, a query or a fragment/],
        ['a user name only', { ...base, baseUrl: 'http://user@127.0.0.1:9/v1' }, /^model\.baseUrl must not carry credentials, a query or a fragment/],
        ['not http(s)', { ...base, baseUrl: 'ftp://127.0.0.1/v1' }, /^model\.baseUrl "ftp:\/\/127\.0\.0\.1\/v1" must be an http or https URL$/],
        ['an encoded slash', { ...base, baseUrl: 'http://127.0.0.1:9/v1/x%2F..%2F..%2Fadmin' }, /must not contain an encoded slash or backslash$/],
        ['not a URL', { ...base, baseUrl: 'no url here' }, /^model\.baseUrl "no url here" is not a URL$/],
        ['an unknown field', { ...base, apiKey: 'sk-inline' }, /^body\/model must NOT have additional properties$/],
        ['an unknown provider', { ...base, provider: 'anthropic' }, /provider/],
        ['maxSteps 0', { ...base, maxSteps: 0 }, /maxSteps/],
      ];
      for (const [what, model, message] of cases) {
        const res = await create(h, model);
        expect(res.statusCode, what).toBe(400);
        const body = res.json() as ErrorBody;
        expect(body.code, what).toBe('VALIDATION');
        expect(body.message, what).toMatch(message);
        expect(res.body, what).not.toContain('operator-secret');
      }
      const list = await h.app.inject({ method: 'GET', url: '/v1/agents' });
      expect((list.json() as { items: unknown[] }).items).toEqual([]);
      // The same spec with an allowed, set variable is accepted.
      expect((await create(h, { ...base, apiKeyEnv: 'DEMO_API_KEY' })).statusCode).toBe(201);
    });

    it('refuses a model for a remote child, and checks a child model like a root model', async () => {
      const h = await start({ driver: { env: {} } });
      const model = await startModelServer(() => answer('ok'));
      const parent = await createRoot(h.app);
      const child = (payload: Record<string, unknown>): Promise<LightMyRequestResponse> =>
        h.app.inject({ method: 'POST', url: `/v1/agents/${parent.id}/children`, headers: { 'x-agent-token': parent.token }, payload: { mode: 'continuable', prompt: 'p', ...payload } });
      const remote = await child({ provider: 'remote', model: spec(model) });
      expect(remote.statusCode).toBe(400);
      expect(remote.json()).toMatchObject({ code: 'VALIDATION', message: 'a remote child runs its turns elsewhere: it cannot have a model' });
      const unset = await child({ model: spec(model, { apiKeyEnv: 'MISSING_API_KEY' }) });
      expect(unset.statusCode).toBe(400);
      expect(unset.json()).toMatchObject({ code: 'VALIDATION', message: 'model.apiKeyEnv "MISSING_API_KEY" is not set in the service\'s environment' });
      const extra = await child({ model: { ...spec(model), secret: 'x' } });
      expect(extra.statusCode).toBe(400);
      expect(await childrenOf(h, parent.id)).toEqual([]);
      expect(model.requests).toHaveLength(0);
    });

    it('allows only the configured endpoints and key variables when the operator lists them', async () => {
      const model = await startModelServer(() => answer('ok'));
      const h = await start({
        driver: { env: { CUSTOM_TOKEN: 'tok-1', DEMO_API_KEY: 'sk-test' } },
        modelPolicy: { baseUrls: [model.url], keyEnvs: ['CUSTOM_TOKEN'] },
      });
      const elsewhere = await create(h, { ...spec(model), baseUrl: 'http://127.0.0.2:9/v1' });
      expect(elsewhere.statusCode).toBe(400);
      expect((elsewhere.json() as ErrorBody).message).toBe('model.baseUrl "http://127.0.0.2:9/v1" is not one of the endpoints this service may call (AGENTFOREST_MODEL_BASE_URLS)');
      // With an explicit list, a name ending in _API_KEY is no longer enough.
      const defaultName = await create(h, spec(model, { apiKeyEnv: 'DEMO_API_KEY' }));
      expect(defaultName.statusCode).toBe(400);
      expect((defaultName.json() as ErrorBody).code).toBe('VALIDATION');
      const ok = await create(h, spec(model, { apiKeyEnv: 'CUSTOM_TOKEN' }));
      expect(ok.statusCode).toBe(201);
      const id = (ok.json() as { agent: AgentView }).agent.id;
      accepted(await followup(h, id, 'hi'));
      await turnEnded(h, id);
      expect(model.requests.map((r) => r.authorization)).toEqual(['Bearer tok-1']);
    });

    it('matches the configured endpoints by origin and whole path segments', async () => {
      const h = await start({ modelPolicy: { baseUrls: ['https://api.openai.com', 'https://gw.internal/openai/'] } });
      const refused = [
        'https://api.openai.com.evil.example/v1',
        'http://api.openai.com/v1',
        'https://api.openai.com:8443/v1',
        'https://gw.internal/openai/../admin',
        'https://gw.internal/openai/%2e%2e/admin',
        'https://gw.internal/openai/.%2E/admin',
        'https://gw.internal/openaix',
        'https://gw.internal/admin',
      ];
      for (const baseUrl of refused) {
        const res = await create(h, { provider: 'openai-compatible', baseUrl, model: 'm' });
        expect(res.statusCode, baseUrl).toBe(400);
        expect(res.json(), baseUrl).toMatchObject({
          code: 'VALIDATION',
          message: `model.baseUrl "${baseUrl}" is not one of the endpoints this service may call (AGENTFOREST_MODEL_BASE_URLS)`,
        });
      }
      expect((await h.app.inject({ method: 'GET', url: '/v1/agents' })).json()).toMatchObject({ items: [] });
      for (const baseUrl of ['https://gw.internal/openai', 'https://gw.internal/openai/v1', 'https://api.openai.com/v1', 'https://api.openai.com']) {
        const res = await create(h, { provider: 'openai-compatible', baseUrl, model: 'm' });
        expect(res.statusCode, baseUrl).toBe(201);
        expect((res.json() as { agent: AgentView }).agent.model!.baseUrl, baseUrl).toBe(baseUrl);
      }
    });

    it('stores the base URL normalised (dot segments resolved, no trailing slash), for roots and children, and is driven there', async () => {
      const model = await startModelServer(() => answer('ok'));
      const h = await start({ modelPolicy: { baseUrls: [`${model.url}/`] } });
      const origin = model.url.slice(0, -'/v1'.length);
      const given = [`${model.url}/`, `${model.url}//`, `${origin}/x/../v1`, `${origin}/./v1/.`, `${origin.toUpperCase()}/v1`];
      for (const baseUrl of given) {
        const res = await create(h, { provider: 'openai-compatible', baseUrl, model: 'm' });
        expect(res.statusCode, baseUrl).toBe(201);
        const id = (res.json() as { agent: AgentView }).agent.id;
        expect((res.json() as { agent: AgentView }).agent.model!.baseUrl, baseUrl).toBe(model.url);
        expect((await header(h, id)).model, baseUrl).toEqual({ provider: 'openai-compatible', baseUrl: model.url, model: 'm' });
      }
      const parent = await createRoot(h.app);
      const child = await h.app.inject({
        method: 'POST',
        url: `/v1/agents/${parent.id}/children`,
        headers: { 'x-agent-token': parent.token },
        payload: { mode: 'continuable', prompt: 'hello', model: { provider: 'openai-compatible', baseUrl: `${origin}/v1/chat/../`, model: 'm' } },
      });
      expect(child.statusCode).toBe(201);
      const childId = (child.json() as { agent: AgentView }).agent.id;
      expect((child.json() as { agent: AgentView }).agent.model!.baseUrl).toBe(model.url);
      expect(((await header(h, childId)).model as ModelSpec).baseUrl).toBe(model.url);
      await until(async () => (await view(h, childId)).status === 'settled', 'the child to settle', DRIVER_WAIT);
      expect(picture(await session(h.app, childId)).slice(-3)).toEqual(['assistant:ok', 'turn-end:completed', 'activation:settled']);
      expect(model.requests).toHaveLength(1);
    });

    it('checks the parent token before the child model: a wrong token with a refused model is 403', async () => {
      const h = await start({ driver: { env: { AGENTFOREST_API_KEY: 'operator-secret' } } });
      const parent = await createRoot(h.app);
      const base = { provider: 'openai-compatible', baseUrl: 'http://127.0.0.1:9/v1', model: 'm' };
      const payloads: Record<string, unknown>[] = [
        { model: { ...base, apiKeyEnv: 'AGENTFOREST_API_KEY' } },
        { model: { ...base, apiKeyEnv: 'MISSING_API_KEY' } },
        { model: { ...base, baseUrl: 'ftp://127.0.0.1/v1' } },
        { provider: 'remote', model: base },
      ];
      for (const extra of payloads) {
        const what = JSON.stringify(extra);
        for (const headers of [{ 'x-agent-token': 'not-the-token' }, {}]) {
          const res = await h.app.inject({ method: 'POST', url: `/v1/agents/${parent.id}/children`, headers, payload: { mode: 'continuable', prompt: 'p', ...extra } });
          expect(res.statusCode, what).toBe(403);
          expect(res.json(), what).toMatchObject({ code: 'UNAUTHORIZED', message: `agent "${parent.id}" requires the token of its live incarnation` });
          expect(res.body, what).not.toMatch(/apiKeyEnv|API_KEY|operator-secret/);
        }
        // With the parent's token, the same body is refused for what it is.
        const own = await h.app.inject({ method: 'POST', url: `/v1/agents/${parent.id}/children`, headers: { 'x-agent-token': parent.token }, payload: { mode: 'continuable', prompt: 'p', ...extra } });
        expect(own.statusCode, what).toBe(400);
        expect((own.json() as ErrorBody).code, what).toBe('VALIDATION');
      }
      expect(await childrenOf(h, parent.id)).toEqual([]);
    });

    it('sends the key as a Bearer token and never shows it', async () => {
      const h = await start({ driver: { env: { DEMO_API_KEY: 'sk-test' } } });
      const model = await startModelServer((req) => {
        if (isChild(req)) return lastMessage(req)!.role === 'user' ? { answer: { toolCalls: [call('report', { output: 'child ok' })] } } : answer('bye');
        return lastMessage(req)!.role === 'user' ? { answer: { toolCalls: [call('spawn_subagent', { prompt: 'help' })] } } : answer('done');
      });
      const created = await h.app.inject({ method: 'POST', url: '/v1/agents', payload: { model: spec(model, { apiKeyEnv: 'DEMO_API_KEY' }) } });
      expect(created.statusCode).toBe(201);
      expect(created.body).not.toContain('sk-test');
      const root = { id: (created.json() as { agent: AgentView }).agent.id };
      accepted(await followup(h, root.id, 'go'));
      await turnEnded(h, root.id);
      let childId = '';
      await until(async () => {
        const kids = await childrenOf(h, root.id);
        childId = kids[0]?.id ?? '';
        return kids[0]?.status === 'settled';
      }, 'the child to settle', DRIVER_WAIT);
      expect(model.requests.length).toBeGreaterThanOrEqual(4);
      expect(new Set(model.requests.map((r) => r.authorization))).toEqual(new Set(['Bearer sk-test']));
      for (const body of model.requests.map((r) => JSON.stringify(r.body))) expect(body).not.toContain('sk-test');
      for (const id of [root.id, childId]) {
        const agentView = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
        expect(agentView.body).toContain('"apiKeyEnv":"DEMO_API_KEY"');
        expect(agentView.body).not.toContain('sk-test');
        const log = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}/session` });
        expect(log.statusCode).toBe(200);
        expect(log.body).not.toContain('sk-test');
      }
      const list = await h.app.inject({ method: 'GET', url: '/v1/agents' });
      expect(list.body).not.toContain('sk-test');
      expect(await h.system.metrics.text()).not.toContain('sk-test');
    });
  });
});
