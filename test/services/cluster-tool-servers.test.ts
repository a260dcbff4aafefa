/**
 * MCP tool servers and backend tools are the cluster's: two instances (two Systems with their
 * own stores and instance ids) on one fresh PostgreSQL database. A server registered on one
 * instance serves the forests of the other within the follow period, and one removed on either
 * leaves both; a restarted instance reaches the stored servers at start; the database's
 * notification of a change brings it to the other instance without waiting for the period.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { openClusterStore } from '../../src/composition/open-store.js';
import { TOOL_SERVER_FOLLOW_MS } from '../../src/tools/mcp/tool-servers.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { startStreamableServer } from '../fixtures/mcp-server.js';
import { createRoot, json, startHarness, until, type Harness } from '../fixtures/harness.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';

let db: TestDatabase;

beforeEach(async () => {
  db = await freshDatabase();
  closeWithTest(() => db.dispose());
});

async function instance(id: string, settingsFollowMs?: number): Promise<Harness> {
  const { store, cluster } = await openClusterStore(db.url, { instanceId: id, leaseMs: 60_000, confirmMs: 5_000 });
  return startHarness({ store, cluster, url: `http://${id.toLowerCase()}`, ...(settingsFollowMs === undefined ? {} : { settingsFollowMs }) });
}

async function serverNames(h: Harness): Promise<string[]> {
  return json<{ items: { name: string }[] }>(await h.app.inject({ method: 'GET', url: '/v1/tool-servers' })).items.map((s) => s.name);
}

/** Within the follow period and a margin for a loaded machine. */
const FOLLOWED = { timeoutMs: TOOL_SERVER_FOLLOW_MS * 5 };

describe('MCP tool servers with several instances', () => {
  it('serves a server registered on one instance to the forests of another, and removes it from both', async () => {
    const mcp = await startStreamableServer();
    const a = await instance('A');
    const b = await instance('B');
    expect((await a.app.inject({ method: 'PUT', url: '/v1/tool-servers/files', payload: { url: mcp.url } })).statusCode).toBe(200);
    await until(async () => (await serverNames(b)).includes('files'), 'instance B to follow the registration', FOLLOWED);

    const root = await createRoot(b.app, { tools: ['mcp__files__*'] });
    const res = await b.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/tool-calls`, headers: { 'x-agent-token': root.token }, payload: { name: 'mcp__files__lookup', input: { id: 'r1' } } });
    expect(json(res)).toMatchObject({ isError: false, content: 'record r1' });

    expect((await b.app.inject({ method: 'DELETE', url: '/v1/tool-servers/files' })).statusCode).toBe(204);
    await until(async () => (await serverNames(a)).length === 0, 'instance A to follow the removal', FOLLOWED);
    expect(await serverNames(b)).toEqual([]);
  });

  it('reaches the stored servers when an instance starts', async () => {
    const mcp = await startStreamableServer();
    const a = await instance('A');
    expect((await a.app.inject({ method: 'PUT', url: '/v1/tool-servers/files', payload: { url: mcp.url } })).statusCode).toBe(200);
    const b = await instance('B');
    expect(json(await b.app.inject({ method: 'GET', url: '/v1/tool-servers/files' }))).toMatchObject({ state: 'ready', tools: expect.arrayContaining([expect.objectContaining({ name: 'lookup' })]) });
  });

  it('follows a change on another instance when the database tells of it, not only at the period', async () => {
    // A period no test waits for: only the notification can bring the changes in time.
    const hour = 3_600_000;
    const a = await instance('A', hour);
    const b = await instance('B', hour);
    const declared = { description: 'Looks a record up.', parameters: { type: 'object' } };
    expect((await a.app.inject({ method: 'PUT', url: '/v1/backend-tools/crm_lookup', payload: declared })).statusCode).toBe(200);
    await until(async () => (await b.app.inject({ method: 'GET', url: '/v1/backend-tools/crm_lookup' })).statusCode === 200, 'instance B to hear of the declaration', FOLLOWED);
    expect((await b.app.inject({ method: 'DELETE', url: '/v1/backend-tools/crm_lookup' })).statusCode).toBe(204);
    await until(async () => (await a.app.inject({ method: 'GET', url: '/v1/backend-tools/crm_lookup' })).statusCode === 404, 'instance A to hear of the removal', FOLLOWED);
  });
});
