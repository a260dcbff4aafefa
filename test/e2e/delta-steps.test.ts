/**
 * Steps over real HTTP (the app listening on 127.0.0.1:0, global fetch): a step is sent as the
 * JSON bytes the step cache rendered, so the body a backend reads must be well-formed JSON of
 * the declared length, full or delta, with multi-byte text intact, and exact against the log.
 */
import { describe, expect, it } from 'vitest';
import type { Step } from '../../src/contract/index.js';
import { startHarness, type Harness } from '../fixtures/harness.js';
import { expectExact } from '../fixtures/step-check.js';

async function listen(): Promise<{ h: Harness; base: string }> {
  const h = await startHarness();
  await h.app.listen({ host: '127.0.0.1', port: 0 });
  const address = h.app.server.address();
  if (address === null || typeof address === 'string') throw new Error('the server has no TCP address');
  return { h, base: `http://127.0.0.1:${address.port}` };
}

async function post(base: string, path: string, body: unknown, token?: string): Promise<Response> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (token !== undefined) headers['x-agent-token'] = token;
  return fetch(`${base}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
}

/** A claimed step as the wire carries it: the body's bytes checked against its headers, then parsed. */
async function claimOverHttp(base: string, id: string, token: string, since?: string): Promise<Step> {
  const res = await post(base, `/v1/agents/${id}/steps/next`, since === undefined ? {} : { since }, token);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
  const bytes = Buffer.from(await res.arrayBuffer());
  expect(Number(res.headers.get('content-length'))).toBe(bytes.length);
  return (JSON.parse(bytes.toString('utf8')) as { step: Step }).step;
}

describe('steps over real HTTP', () => {
  it('a full step and then a delta step arrive as well-formed JSON of their declared length, exact against the log', async () => {
    const { h, base } = await listen();
    const created = (await (await post(base, '/v1/agents', { id: 'r', instructions: 'Réponds en français 🌲.' })).json()) as { agentToken: string };
    const token = created.agentToken;
    expect((await post(base, '/v1/agents/r/messages', { content: 'Quel temps à Zürich? 日本語', delivery: 'followup' })).status).toBe(202);

    const first = await claimOverHttp(base, 'r', token);
    const full = await expectExact(h, 'r', 'Réponds en français 🌲.', first);
    const call = { id: 'c1', name: 'météo', input: { ville: 'Zürich' } };
    expect((await post(base, `/v1/agents/r/steps/${first.id}/output`, { content: 'Je regarde…', toolCalls: [call] }, token)).status).toBe(200);
    expect((await post(base, `/v1/agents/r/steps/${first.id}/tool-results`, { results: [{ toolCallId: 'c1', content: '4°C, pluie ☔' }] }, token)).status).toBe(200);

    const second = await claimOverHttp(base, 'r', token, first.id);
    expect(Object.hasOwn(second, 'messages')).toBe(false);
    expect(second.messagesSince).toStrictEqual([
      { role: 'assistant', content: 'Je regarde…', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'météo', arguments: '{"ville":"Zürich"}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: '4°C, pluie ☔' },
    ]);
    await expectExact(h, 'r', 'Réponds en français 🌲.', second, full.messages);
  });
});
