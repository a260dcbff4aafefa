/**
 * What a tenant's key makes of the tools: MCP tool servers, declared backend tools and approval
 * rules made with it are the tenant's (listed to it and to admins, another tenant's answered as
 * an unknown name, a global one changed only by an admin, the name checked again in the span
 * that writes it); a tenant's tools exist for its agents only and its rules apply to them only;
 * the inbox and the tool worker pool show a tenant its own agents' only, on one instance and
 * across two; and a tenant's tool server is reached at public addresses only, never as a
 * command, at registration and at every connection, and sends a model key only while that key
 * is lent to the tenant. An admin key keeps today's powers.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { Approval } from '../../src/contract/index.js';
import { openClusterStore } from '../../src/composition/open-store.js';
import { TOOL_SERVER_FOLLOW_MS } from '../../src/tools/mcp/tool-servers.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { startSseServer, startStreamableServer } from '../fixtures/mcp-server.js';
import { closedPort } from '../fixtures/ports.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';
import { createRoot, json, startHarness, until, type CreatedRoot, type Harness, type HarnessOptions } from '../fixtures/harness.js';

const STDIO_SERVER = fileURLToPath(new URL('../fixtures/mcp-stdio-server.ts', import.meta.url));
const ADMIN = 'admin-key-for-tests';
const admin = { authorization: `Bearer ${ADMIN}` };
type Key = Record<string, string>;
const LOOKUP = { description: 'Looks a customer up.', parameters: { type: 'object', properties: { email: { type: 'string' } } } };

async function harness(options: HarnessOptions = {}): Promise<Harness> {
  const h = await startHarness({ apiKeys: [ADMIN], ...options });
  closeWithTest(() => h.close());
  return h;
}

/** A harness where a tenant's tool server may be at a loopback address, so the test MCP servers serve tenants. */
const loopbackTenants = (): Promise<Harness> => harness({ toolServers: { tenantPrivateAddresses: true } });

async function tenantWithKey(h: Harness, id: string, body: Record<string, unknown> = {}): Promise<Key> {
  expect((await api(h, admin, 'POST', '/v1/tenants', { id, ...body })).statusCode).toBe(201);
  const key = await api(h, admin, 'POST', `/v1/tenants/${id}/keys`);
  expect(key.statusCode, key.body).toBe(201);
  return { authorization: `Bearer ${json<{ key: string }>(key).key}` };
}

function api(h: Harness, key: Key, method: 'GET' | 'PUT' | 'POST' | 'DELETE' | 'PATCH', url: string, payload?: unknown, headers: Key = {}): Promise<LightMyRequestResponse> {
  return h.app.inject({ method, url, headers: { ...key, ...headers }, ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }) });
}

const asAgent = (key: Key, agent: CreatedRoot): Key => ({ ...key, 'x-agent-token': agent.token });

async function names(h: Harness, key: Key, url: string): Promise<string[]> {
  const res = await api(h, key, 'GET', url);
  expect(res.statusCode, res.body).toBe(200);
  return json<{ items: { name?: string; id?: string; tenantId?: string }[] }>(res).items.map((i) => `${i.name ?? i.id}:${i.tenantId ?? '-'}`);
}

async function toolNames(h: Harness, key: Key, agent: CreatedRoot): Promise<string[]> {
  return json<{ tools: { name: string }[] }>(await api(h, asAgent(key, agent), 'GET', `/v1/agents/${agent.id}/tools`)).tools.map((t) => t.name).sort();
}

interface Output {
  toolResults: { content: string; isError: boolean }[];
  awaiting: { id: string; name: string }[];
  approvals?: Approval[];
}

/** The agent's next step, claimed and answered with these calls; returns the answer. */
async function stepCalling(h: Harness, key: Key, agent: CreatedRoot, calls: { id: string; name: string; input: unknown }[]): Promise<{ out: Output; tools: string[] }> {
  expect((await api(h, key, 'POST', `/v1/agents/${agent.id}/messages`, { content: 'go', delivery: 'followup' })).statusCode).toBe(202);
  const claimed = await api(h, asAgent(key, agent), 'POST', `/v1/agents/${agent.id}/steps/next`, { waitMs: 5_000 });
  expect(claimed.statusCode, claimed.body).toBe(200);
  const step = json<{ step: { id: string; tools: { function: { name: string } }[] } }>(claimed).step;
  const out = await api(h, asAgent(key, agent), 'POST', `/v1/agents/${agent.id}/steps/${step.id}/output`, { toolCalls: calls });
  expect(out.statusCode, out.body).toBe(200);
  return { out: json<Output>(out), tools: step.tools.map((t) => t.function.name).sort() };
}

/** A refusal of `name` must be the body an unknown name gets, word for word but the name. */
async function expectUnknownBody(foreign: LightMyRequestResponse, unknown: LightMyRequestResponse, name: string, unknownName: string): Promise<void> {
  expect(foreign.statusCode).toBe(unknown.statusCode);
  expect(unknown.statusCode).toBe(404);
  expect(json(foreign)).toEqual(JSON.parse(unknown.body.split(unknownName).join(name)));
}

describe("a tenant's tool server is reached at public addresses only", () => {
  it('a tenant key registering a server at a loopback, private or link-local address, or as a stdio command, is refused 400 and nothing is reached', async () => {
    const mcp = await startStreamableServer();
    const h = await harness({ toolServers: { commands: true } });
    const acme = await tenantWithKey(h, 'acme');
    const port = new URL(mcp.url).port;
    const refused = [mcp.url, `http://localhost:${port}/mcp`, `http://[::1]:${port}/mcp`, `http://[::ffff:127.0.0.1]:${port}/mcp`, 'http://10.1.2.3/mcp', 'http://192.168.7.7/mcp', 'http://169.254.169.254/latest', 'http://192.0.2.1/mcp', 'http://[2001:db8::1]/mcp'];
    for (const url of refused) {
      const res = await api(h, acme, 'PUT', '/v1/tool-servers/files', { url });
      expect([res.statusCode, json(res).code], url).toEqual([400, 'VALIDATION']);
      expect(json<{ message: string }>(res).message, url).toMatch(/public address/);
    }
    const stdio = await api(h, acme, 'PUT', '/v1/tool-servers/files', { command: process.execPath, args: ['--import', 'tsx', STDIO_SERVER] });
    expect([stdio.statusCode, json(stdio).code]).toEqual([400, 'VALIDATION']);
    expect(json<{ message: string }>(stdio).message).toMatch(/never a command/);
    expect(await names(h, admin, '/v1/tool-servers')).toEqual([]);
    expect(mcp.headers).toEqual([]);
  });

  it('an admin key may register a server at a loopback address and as a stdio command', async () => {
    const mcp = await startStreamableServer();
    const h = await harness({ toolServers: { commands: true } });
    const loopback = await api(h, admin, 'PUT', '/v1/tool-servers/files', { url: mcp.url });
    expect(json(loopback)).toMatchObject({ name: 'files', state: 'ready' });
    expect(json(loopback)).not.toHaveProperty('tenantId');
    const stdio = await api(h, admin, 'PUT', '/v1/tool-servers/local', { command: process.execPath, args: ['--import', 'tsx', STDIO_SERVER], timeoutMs: 20_000 });
    expect(json(stdio)).toMatchObject({ name: 'local', transport: 'stdio', state: 'ready' });
  });

  it("a tenant's stored server is checked again at connection: at a loopback address or as a command it is never reached", async () => {
    const mcp = await startStreamableServer();
    const h = await harness({ toolServers: { commands: true } });
    // As if its name resolved to a public address at registration and to a loopback one now.
    const updatedAt = new Date().toISOString();
    h.system.log.changeSettings({ op: 'put', setting: { kind: 'tool-server', name: 'moved', value: { transport: 'http', url: mcp.url, tenantId: 'acme' }, updatedAt } });
    const named = mcp.url.replace('127.0.0.1', 'localhost');
    h.system.log.changeSettings({ op: 'put', setting: { kind: 'tool-server', name: 'named', value: { transport: 'http', url: named, tenantId: 'acme' }, updatedAt } });
    h.system.log.changeSettings({ op: 'put', setting: { kind: 'tool-server', name: 'proc', value: { transport: 'stdio', command: process.execPath, args: ['--import', 'tsx', STDIO_SERVER], tenantId: 'acme' }, updatedAt } });
    await h.system.log.durable();
    await h.system.toolServers.sync();
    for (const name of ['moved', 'named']) {
      const view = json<{ error: string }>(await api(h, admin, 'GET', `/v1/tool-servers/${name}`));
      expect(view, name).toMatchObject({ state: 'unreachable', tenantId: 'acme', tools: [] });
      expect(view.error, name).toMatch(/public address/);
    }
    expect(json(await api(h, admin, 'GET', '/v1/tool-servers/proc'))).toMatchObject({ state: 'unreachable', error: "a tenant's tool server is never started as a command" });
    expect(mcp.headers).toEqual([]);
  });
});

describe("a tenant's tool server sends a model key only while the key is the tenant's", () => {
  const SECRET = { SHARED_API_KEY: 'shared-secret' };
  const secretHarness = (): Promise<Harness> => harness({ toolServers: { tenantPrivateAddresses: true }, driver: { env: SECRET } });
  const NO_LONGER = 'headers.authorization names "SHARED_API_KEY", which is no longer lent to tenant "acme"';

  it('a key given to another tenant after registration is never sent again: the call fails unsent and the server is unreachable naming it; given back, it is sent again', async () => {
    const mcp = await startStreamableServer();
    const h = await secretHarness();
    const acme = await tenantWithKey(h, 'acme', { modelKeyEnvs: ['SHARED_API_KEY'] });
    await tenantWithKey(h, 'globex');
    const registered = await api(h, acme, 'PUT', '/v1/tool-servers/crm', { url: mcp.url, headers: { authorization: { env: 'SHARED_API_KEY' } } });
    expect(json(registered), registered.body).toMatchObject({ state: 'ready', tenantId: 'acme' });
    const root = await createRoot(h.app, { tools: ['mcp__crm__echo'] }, acme);
    const call = async () => json<{ isError: boolean; content: string }>(await api(h, asAgent(acme, root), 'POST', `/v1/agents/${root.id}/tool-calls`, { name: 'mcp__crm__echo', input: { text: 'hi' } }));
    expect(await call()).toMatchObject({ isError: false });
    expect(mcp.headers.at(-1)?.authorization).toBe('shared-secret');

    const patch = async (id: string, modelKeyEnvs: string[]) => expect((await api(h, admin, 'PATCH', `/v1/tenants/${id}`, { modelKeyEnvs })).statusCode).toBe(200);
    await patch('acme', []);
    await patch('globex', ['SHARED_API_KEY']);
    const sent = mcp.headers.length;
    expect(await call()).toMatchObject({ isError: true, content: expect.stringContaining(NO_LONGER) });
    expect(json(await api(h, acme, 'GET', '/v1/tool-servers/crm'))).toMatchObject({ state: 'unreachable', error: expect.stringContaining(NO_LONGER) });
    expect(mcp.calls.filter((c) => c.tool === 'echo')).toHaveLength(1);
    expect(mcp.headers.slice(sent)).toEqual([]);

    await patch('globex', []);
    await patch('acme', ['SHARED_API_KEY']);
    await until(async () => json<{ state: string }>(await api(h, acme, 'GET', '/v1/tool-servers/crm')).state === 'ready', 'the server reached again', { timeoutMs: 10_000 });
    expect(await call()).toMatchObject({ isError: false });
    expect(mcp.headers.at(-1)?.authorization).toBe('shared-secret');
  });

  it("a tenant's stored server is never reached with a key that is not its tenant's, nor at a URL the keys are not lent to", async () => {
    const mcp = await startStreamableServer();
    const h = await harness({ toolServers: { tenantPrivateAddresses: true }, driver: { env: { ...SECRET, ACME_API_KEY: 'acme-secret' } }, modelPolicy: { baseUrls: ['https://tools.example/'] } });
    await tenantWithKey(h, 'acme', { modelKeyEnvs: ['ACME_API_KEY'] });
    await tenantWithKey(h, 'globex', { modelKeyEnvs: ['SHARED_API_KEY'] });
    // As if registered while the key was acme's (and the endpoints open), changed since on another instance.
    const stored = (name: string, env: string) => {
      const value = { transport: 'http', url: mcp.url, headers: { authorization: { env } }, tenantId: 'acme' };
      h.system.log.changeSettings({ op: 'put', setting: { kind: 'tool-server', name, value, updatedAt: new Date().toISOString() } });
    };
    stored('crm', 'SHARED_API_KEY');
    stored('own', 'ACME_API_KEY');
    await h.system.log.durable();
    await h.system.toolServers.sync();
    const view = async (name: string) => json(await api(h, admin, 'GET', `/v1/tool-servers/${name}`));
    expect(await view('crm')).toMatchObject({ state: 'unreachable', tenantId: 'acme', tools: [], error: expect.stringContaining(NO_LONGER) });
    expect(await view('own')).toMatchObject({ state: 'unreachable', tools: [], error: expect.stringContaining('is not one of the endpoints this service lends secrets to') });
    expect(mcp.headers).toEqual([]);
  });
});

describe("tool servers made with a tenant's key", () => {
  it("are the tenant's: listed to it and to admins, unknown to another tenant, and a global one is read by all but changed by admins only", async () => {
    const mcp = await startStreamableServer();
    const h = await loopbackTenants();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    expect(json(await api(h, acme, 'PUT', '/v1/tool-servers/acme-files', { url: mcp.url }))).toMatchObject({ name: 'acme-files', state: 'ready', tenantId: 'acme' });
    expect((await api(h, admin, 'PUT', '/v1/tool-servers/shared', { url: mcp.url })).statusCode).toBe(200);
    expect(await names(h, acme, '/v1/tool-servers')).toEqual(['acme-files:acme', 'shared:-']);
    expect(await names(h, globex, '/v1/tool-servers')).toEqual(['shared:-']);
    expect(await names(h, admin, '/v1/tool-servers')).toEqual(['acme-files:acme', 'shared:-']);
    for (const method of ['GET', 'PUT', 'DELETE'] as const) {
      const body = method === 'PUT' ? { url: mcp.url } : undefined;
      await expectUnknownBody(await api(h, globex, method, '/v1/tool-servers/acme-files', body), await api(h, globex, method === 'PUT' ? 'GET' : method, '/v1/tool-servers/nobody'), 'acme-files', 'nobody');
    }
    expect(json(await api(h, globex, 'GET', '/v1/tool-servers/shared'))).toMatchObject({ name: 'shared' });
    for (const method of ['PUT', 'DELETE'] as const) {
      const res = await api(h, acme, method, '/v1/tool-servers/shared', method === 'PUT' ? { url: mcp.url } : undefined);
      expect([res.statusCode, json(res).code, json(res).message]).toEqual([403, 'UNAUTHORIZED', '"shared" is global: only an admin key may change it']);
    }
    expect(await names(h, admin, '/v1/tool-servers')).toEqual(['acme-files:acme', 'shared:-']);
    expect((await api(h, acme, 'DELETE', '/v1/tool-servers/acme-files')).statusCode).toBe(204);
    expect(await names(h, admin, '/v1/tool-servers')).toEqual(['shared:-']);
  });

  it("a tenant's server of the earlier HTTP+SSE revision is reached and called through the guard's connections too", async () => {
    const sse = await startSseServer();
    const h = await loopbackTenants();
    const acme = await tenantWithKey(h, 'acme');
    expect(json(await api(h, acme, 'PUT', '/v1/tool-servers/old', { url: sse.url }))).toMatchObject({ state: 'ready', tenantId: 'acme' });
    const root = await createRoot(h.app, { tools: ['mcp__old__lookup'] }, acme);
    const res = await api(h, asAgent(acme, root), 'POST', `/v1/agents/${root.id}/tool-calls`, { name: 'mcp__old__lookup', input: { id: 'r1' } });
    expect(json(res)).toMatchObject({ isError: false, content: 'record r1' });
  });

  it("an admin replacing a tenant's server keeps it the tenant's, held to a tenant's rules", async () => {
    const mcp = await startStreamableServer();
    const h = await loopbackTenants();
    const acme = await tenantWithKey(h, 'acme');
    expect((await api(h, acme, 'PUT', '/v1/tool-servers/files', { url: mcp.url })).statusCode).toBe(200);
    expect(json(await api(h, admin, 'PUT', '/v1/tool-servers/files', { url: mcp.url, tools: ['echo'] }))).toMatchObject({ tools: [{ name: 'echo' }], tenantId: 'acme' });
    const command = await api(h, admin, 'PUT', '/v1/tool-servers/files', { command: process.execPath });
    expect([command.statusCode, json(command).code]).toEqual([400, 'VALIDATION']);
  });

  it('the registry checks the name again in the span that writes it: of two tenants putting one name at once, one gets it and the other the unknown-name refusal', async () => {
    const mcp = await startStreamableServer();
    const h = await loopbackTenants();
    const results = await Promise.allSettled([h.system.toolServers.put('files', { url: mcp.url }, 'acme'), h.system.toolServers.put('files', { url: mcp.url }, 'globex')]);
    const won = results.findIndex((r) => r.status === 'fulfilled');
    const lost = results[1 - won] as PromiseRejectedResult;
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    expect(lost.reason).toMatchObject({ code: 'TOOL_SERVER_NOT_FOUND', message: 'no tool server is registered as "files"' });
    expect(h.system.toolServers.ownerOf('files')).toEqual({ owner: ['acme', 'globex'][won] });
  });

  it("an admin's put over a name a tenant took while the admin's server was being reached is made again as the tenant's", async () => {
    const held = await holdingServer();
    const mcp = await startStreamableServer();
    const h = await loopbackTenants();
    const adminPut = h.system.toolServers.put('files', { url: held.url, timeoutMs: 10_000 }, undefined);
    await until(() => held.received > 0, "the admin's server to be reached");
    expect((await h.system.toolServers.put('files', { url: mcp.url }, 'acme')).tenantId).toBe('acme');
    held.release();
    expect(await adminPut).toMatchObject({ name: 'files', state: 'unreachable', tenantId: 'acme' });
    expect(h.system.toolServers.ownerOf('files')).toEqual({ owner: 'acme' });
  });
});

describe("a tenant's tools exist for its agents only", () => {
  it("its MCP server's tools are listed to and run for its agents; to another tenant's agents and an admin's they are unknown names", async () => {
    const mcp = await startStreamableServer();
    const h = await loopbackTenants();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    expect((await api(h, acme, 'PUT', '/v1/tool-servers/acme-files', { url: mcp.url, tools: ['echo'] })).statusCode).toBe(200);
    expect((await api(h, admin, 'PUT', '/v1/tool-servers/shared', { url: mcp.url, tools: ['echo'] })).statusCode).toBe(200);
    const grants = { tools: ['mcp__*'] };
    const mine = await createRoot(h.app, grants, acme);
    const theirs = await createRoot(h.app, grants, globex);
    const admins = await createRoot(h.app, grants, admin);
    expect(await toolNames(h, acme, mine)).toEqual(['mcp__acme-files__echo', 'mcp__shared__echo']);
    expect(await toolNames(h, globex, theirs)).toEqual(['mcp__shared__echo']);
    expect(await toolNames(h, admin, admins)).toEqual(['mcp__shared__echo']);
    expect(json<{ effective: string[] }>(await api(h, globex, 'GET', `/v1/agents/${theirs.id}/grants`)).effective).toEqual(['mcp__shared__echo']);

    const call = (key: Key, agent: CreatedRoot, name: string) => api(h, asAgent(key, agent), 'POST', `/v1/agents/${agent.id}/tool-calls`, { name, input: { text: 'hi' } });
    for (const [key, agent] of [[globex, theirs], [admin, admins]] as const) {
      await expectUnknownBody(await call(key, agent, 'mcp__acme-files__echo'), await call(key, agent, 'mcp__nobody__echo'), 'mcp__acme-files__echo', 'mcp__nobody__echo');
    }
    expect(mcp.calls).toEqual([]);
    expect(json(await call(acme, mine, 'mcp__acme-files__echo'))).toMatchObject({ isError: false });
    expect(mcp.calls).toEqual([expect.objectContaining({ tool: 'echo', idempotencyKey: expect.any(String) })]);

    // In a step: not among its tools, and a call to it is what a call to a name no tool has is (the backend's own).
    const { out, tools } = await stepCalling(h, globex, theirs, [{ id: 'c1', name: 'mcp__acme-files__echo', input: { text: 'hi' } }, { id: 'c2', name: 'mcp__nobody__echo', input: { text: 'hi' } }]);
    expect(tools).toEqual(['mcp__shared__echo']);
    expect(out).toMatchObject({ toolResults: [], awaiting: [{ id: 'c1' }, { id: 'c2' }] });
    expect(mcp.calls).toHaveLength(1);
  });

  it("its declared backend tools are listed to its agents and offered to workers for them only; another tenant's name is unknown and refused", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    expect(json(await api(h, acme, 'PUT', '/v1/backend-tools/acme_lookup', LOOKUP))).toEqual({ name: 'acme_lookup', ...LOOKUP, tenantId: 'acme' });
    expect((await api(h, admin, 'PUT', '/v1/backend-tools/shared_lookup', LOOKUP)).statusCode).toBe(200);
    expect(await names(h, acme, '/v1/backend-tools')).toEqual(['acme_lookup:acme', 'shared_lookup:-']);
    expect(await names(h, globex, '/v1/backend-tools')).toEqual(['shared_lookup:-']);
    expect(await names(h, admin, '/v1/backend-tools')).toEqual(['acme_lookup:acme', 'shared_lookup:-']);
    for (const method of ['GET', 'PUT', 'DELETE'] as const) {
      await expectUnknownBody(await api(h, globex, method, '/v1/backend-tools/acme_lookup', method === 'PUT' ? LOOKUP : undefined), await api(h, globex, method === 'PUT' ? 'GET' : method, '/v1/backend-tools/nobody'), 'acme_lookup', 'nobody');
    }
    const global = await api(h, acme, 'DELETE', '/v1/backend-tools/shared_lookup');
    expect([global.statusCode, json(global).message]).toEqual([403, '"shared_lookup" is global: only an admin key may change it']);

    const grants = { tools: ['acme_lookup', 'shared_lookup'] };
    const theirs = await createRoot(h.app, grants, globex);
    const mine = await createRoot(h.app, grants, acme);
    const foreign = await stepCalling(h, globex, theirs, [{ id: 'c1', name: 'acme_lookup', input: {} }]);
    expect(foreign.tools).toEqual(['shared_lookup']);
    expect(foreign.out.awaiting).toEqual([expect.objectContaining({ id: 'c1' })]);
    expect((await api(h, admin, 'POST', '/v1/tool-calls/next', {})).statusCode).toBe(204);
    const own = await stepCalling(h, acme, mine, [{ id: 'c1', name: 'acme_lookup', input: {} }]);
    expect(own.tools).toEqual(['acme_lookup', 'shared_lookup']);
    expect(json(await api(h, acme, 'POST', '/v1/tool-calls/next', {}))).toMatchObject({ call: { agentId: mine.id, name: 'acme_lookup' } });
  });

  it('the registry checks a backend tool or a rule name again in the span that writes it: the first tenant gets it, the second the unknown-name refusal', async () => {
    const h = await harness();
    const tools = await Promise.allSettled([h.system.backendTools.put('lookup', LOOKUP, 'acme'), h.system.backendTools.put('lookup', LOOKUP, 'globex')]);
    expect(tools.map((r) => r.status)).toEqual(['fulfilled', 'rejected']);
    expect((tools[1] as PromiseRejectedResult).reason).toMatchObject({ code: 'BACKEND_TOOL_NOT_FOUND', message: 'no backend tool is declared as "lookup"' });
    expect(h.system.backendTools.ownerOf('lookup')).toEqual({ owner: 'acme' });
    const rule = { tool: 'spawn_subagent', decision: 'deny' } as const;
    const rules = await Promise.allSettled([h.system.approvalRules.put('r', rule, 'acme'), h.system.approvalRules.put('r', rule, 'globex')]);
    expect((rules[1] as PromiseRejectedResult).reason).toMatchObject({ code: 'APPROVAL_RULE_NOT_FOUND', message: 'no approval rule has the id "r"' });
    expect(h.system.approvalRules.ownerOf('r')).toEqual({ owner: 'acme' });
  });
});

describe("a tenant's approval rules and approvals", () => {
  it("its rules apply to its agents only, global ones to every agent; it lists its own and the global ones and changes only its own", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    expect(json(await api(h, acme, 'PUT', '/v1/approval-rules/no-spawn', { tool: 'spawn_subagent', decision: 'deny' }))).toMatchObject({ id: 'no-spawn', tenantId: 'acme' });
    expect((await api(h, admin, 'PUT', '/v1/approval-rules/no-compact', { tool: 'compact_*', decision: 'deny' })).statusCode).toBe(200);
    expect(await names(h, acme, '/v1/approval-rules')).toEqual(['no-compact:-', 'no-spawn:acme']);
    expect(await names(h, globex, '/v1/approval-rules')).toEqual(['no-compact:-']);
    expect(await names(h, admin, '/v1/approval-rules')).toEqual(['no-compact:-', 'no-spawn:acme']);
    await expectUnknownBody(await api(h, globex, 'DELETE', '/v1/approval-rules/no-spawn'), await api(h, globex, 'DELETE', '/v1/approval-rules/nobody'), 'no-spawn', 'nobody');
    const overGlobal = await api(h, acme, 'PUT', '/v1/approval-rules/no-compact', { tool: 'compact_*', decision: 'allow' });
    expect([overGlobal.statusCode, json(overGlobal).code]).toEqual([403, 'UNAUTHORIZED']);

    const spawn = [{ id: 'c1', name: 'spawn_subagent', input: { prompt: 'look' } }];
    const denied = await stepCalling(h, acme, await createRoot(h.app, {}, acme), spawn);
    expect(denied.out.toolResults).toEqual([expect.objectContaining({ isError: true, content: 'Error: the call to spawn_subagent is not allowed here' })]);
    for (const key of [globex, admin]) {
      const ran = await stepCalling(h, key, await createRoot(h.app, {}, key), spawn);
      expect(ran.out.toolResults).toEqual([expect.objectContaining({ isError: false })]);
    }
  });

  it("the inbox shows a tenant its own agents' approvals, page by page past other tenants'; a remembered rule is the agent's tenant's", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    expect((await api(h, admin, 'PUT', '/v1/approval-rules/ask-spawns', { tool: 'spawn_*', decision: 'ask' })).statusCode).toBe(200);
    const spawn = [{ id: 'c1', name: 'spawn_subagent', input: { prompt: 'look' } }];
    const ask = async (key: Key): Promise<Approval> => (await stepCalling(h, key, await createRoot(h.app, {}, key), spawn)).out.approvals![0]!;
    const a1 = await ask(acme);
    const g1 = await ask(globex);
    const a2 = await ask(acme);
    const ids = async (key: Key, query = ''): Promise<{ ids: string[]; nextCursor: string | null }> => {
      const page = json<{ items: Approval[]; nextCursor: string | null }>(await api(h, key, 'GET', `/v1/approvals${query}`));
      return { ids: page.items.map((a) => a.id), nextCursor: page.nextCursor };
    };
    expect((await ids(acme)).ids.sort()).toEqual([a1.id, a2.id].sort());
    expect((await ids(globex)).ids).toEqual([g1.id]);
    expect((await ids(admin)).ids.sort()).toEqual([a1.id, g1.id, a2.id].sort());
    expect((await ids(globex, `?rootId=${a1.rootId}`)).ids).toEqual([]);
    const first = await ids(acme, '?limit=1');
    expect(first.nextCursor).not.toBeNull();
    const second = await ids(acme, `?limit=1&cursor=${encodeURIComponent(first.nextCursor!)}`);
    expect([...first.ids, ...second.ids].sort()).toEqual([a1.id, a2.id].sort());
    expect(second.nextCursor).toBeNull();

    const decided = await api(h, acme, 'POST', `/v1/approvals/${a1.id}/decision`, { decision: 'approve', remember: 'always' });
    expect(decided.statusCode, decided.body).toBe(200);
    expect(await names(h, acme, '/v1/approval-rules')).toEqual([`${a1.id}-always:acme`, 'ask-spawns:-']);
    expect(await names(h, globex, '/v1/approval-rules')).toEqual(['ask-spawns:-']);
    // A tenant's rule narrows the admin's, never widens it: the admin's `ask` still asks.
    expect((await stepCalling(h, acme, await createRoot(h.app, {}, acme), spawn)).out.approvals).toHaveLength(1);
    expect((await stepCalling(h, globex, await createRoot(h.app, {}, globex), spawn)).out.approvals).toHaveLength(1);
    // Without the admin's rule, acme's remembered one decides for acme's agents alone.
    expect((await api(h, admin, 'DELETE', '/v1/approval-rules/ask-spawns')).statusCode).toBe(204);
    expect((await api(h, acme, 'PUT', '/v1/approval-rules/acme-asks', { tool: 'spawn_*', decision: 'ask' })).statusCode).toBe(200);
    expect((await stepCalling(h, acme, await createRoot(h.app, {}, acme), spawn)).out).toMatchObject({ toolResults: [{ isError: false }] });
    expect((await stepCalling(h, globex, await createRoot(h.app, {}, globex), spawn)).out).toMatchObject({ toolResults: [{ isError: false }] });
  });
});

describe("the tool worker pool with a tenant's key", () => {
  it("hands a tenant's worker calls of its own agents only, and an admin's worker any, or one tenant's", async () => {
    const h = await harness();
    const acme = await tenantWithKey(h, 'acme');
    const globex = await tenantWithKey(h, 'globex');
    expect((await api(h, admin, 'PUT', '/v1/backend-tools/lookup', LOOKUP)).statusCode).toBe(200);
    const theirs = await createRoot(h.app, { tools: ['lookup'] }, globex);
    const mine = await createRoot(h.app, { tools: ['lookup'] }, acme);
    // Globex's call is offered first: the oldest, which acme's worker must pass over.
    await stepCalling(h, globex, theirs, [{ id: 'c1', name: 'lookup', input: {} }]);
    await stepCalling(h, acme, mine, [{ id: 'c1', name: 'lookup', input: {} }]);
    const next = (key: Key, body: Record<string, unknown> = {}) => api(h, key, 'POST', '/v1/tool-calls/next', body);
    expect((await next(acme, { tenantId: 'globex' })).statusCode).toBe(204);
    expect(json(await next(acme))).toMatchObject({ call: { agentId: mine.id } });
    expect((await next(acme)).statusCode).toBe(204);
    expect(json(await next(admin, { tenantId: 'globex' }))).toMatchObject({ call: { agentId: theirs.id } });
  });
});

describe('the tool worker pool across two instances', () => {
  it("a tenant's claim on one instance is answered from the other's calls of its own agents only: the filter travels with the key", async () => {
    const db = await freshDatabase();
    closeWithTest(() => db.dispose());
    const a = await clusterInstance(db, 'A');
    const b = await clusterInstance(db, 'B');
    const acme = await tenantWithKey(a, 'acme');
    const globex = await tenantWithKey(a, 'globex');
    const known = async (key: Key): Promise<boolean> => (await api(b, key, 'GET', '/v1/agents')).statusCode === 200;
    await until(async () => (await known(acme)) && (await known(globex)), 'instance B to know the tenant keys', { timeoutMs: TOOL_SERVER_FOLLOW_MS * 5 });
    expect((await api(a, admin, 'PUT', '/v1/backend-tools/lookup', LOOKUP)).statusCode).toBe(200);
    // Both calls wait on instance A, globex's the oldest.
    const theirs = await createRoot(a.app, { tools: ['lookup'] }, globex);
    const mine = await createRoot(a.app, { tools: ['lookup'] }, acme);
    await stepCalling(a, globex, theirs, [{ id: 'c1', name: 'lookup', input: {} }]);
    await stepCalling(a, acme, mine, [{ id: 'c1', name: 'lookup', input: {} }]);
    expect(json(await api(b, acme, 'POST', '/v1/tool-calls/next', {}))).toMatchObject({ call: { agentId: mine.id } });
    expect((await api(b, acme, 'POST', '/v1/tool-calls/next', {})).statusCode).toBe(204);
    expect(json(await api(b, globex, 'POST', '/v1/tool-calls/next', {}))).toMatchObject({ call: { agentId: theirs.id } });
  });
});

/** One of several instances on `db`, serving HTTP on loopback at the URL it advertises to the others. */
async function clusterInstance(db: TestDatabase, id: string): Promise<Harness> {
  const port = await closedPort();
  const { store, cluster } = await openClusterStore(db.url, { instanceId: id, leaseMs: 60_000, confirmMs: 5_000 });
  const h = await harness({ store, cluster, url: `http://127.0.0.1:${port}` });
  await h.app.listen({ host: '127.0.0.1', port });
  return h;
}

/** An HTTP server that holds the first request until released; every request is then answered 404 at once. */
async function holdingServer(): Promise<{ url: string; received: number; release(): void }> {
  const held: ServerResponse[] = [];
  let released = false;
  const state = { received: 0 };
  const server = createServer((req, res) => {
    state.received += 1;
    req.resume();
    if (released) res.writeHead(404).end();
    else held.push(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closeWithTest(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    get received() {
      return state.received;
    },
    release() {
      released = true;
      for (const res of held.splice(0)) res.writeHead(404).end();
    },
  };
}
