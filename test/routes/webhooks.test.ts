/**
 * Webhooks over the app, with real receivers on loopback: subscriptions, signatures checked by
 * the standardwebhooks verifier, retries with backoff, giving up, the address guard, and a slow
 * receiver that holds only its own stream.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterEach, describe, expect, it } from 'vitest';
import { callReport, startChild } from '../fixtures/forest.js';
import { claim, createRoot, json, postOutput, send, session, startHarness, until, type Harness } from '../fixtures/harness.js';

interface Received {
  headers: IncomingMessage['headers'];
  body: string;
}

interface Receiver {
  url: string;
  received: Received[];
  close(): Promise<void>;
}

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => { s.closeAllConnections(); s.close(r); })));
});

/** A receiver on 127.0.0.1 that records every request and answers with `answer(n)` (n from 0). */
async function receiver(answer: (n: number, res: ServerResponse) => void = (_n, res) => res.end('ok')): Promise<Receiver> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      answer(received.length - 1, res);
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/hook`, received, close: () => new Promise((r) => server.close(() => r())) };
}

const FAST = { allowPrivate: true, pollMs: 20, backoff: { baseMs: 20, maxMs: 200 } };

async function subscribe(h: Harness, body: Record<string, unknown>) {
  return h.app.inject({ method: 'POST', url: '/v1/webhooks', payload: body });
}

/** One root turn: a message, a claimed step, an output that ends it. */
async function oneTurn(h: Harness, root: Awaited<ReturnType<typeof createRoot>>): Promise<void> {
  await send(h.app, root.id, 'hello');
  const step = await claim(h.app, root);
  expect((await postOutput(h.app, root, step!.id, { content: 'done' })).statusCode).toBe(200);
}

describe('webhook subscriptions', () => {
  it('creates a subscription with a generated secret shown once, lists it without the secret, and deletes it', async () => {
    const h = await startHarness({ webhooks: FAST });
    const hook = await receiver();
    const res = await subscribe(h, { url: hook.url, events: ['turn.ended'] });
    expect(res.statusCode).toBe(201);
    const created = json<{ id: string; secret: string; rootId: null; events: string[]; url: string }>(res);
    expect(Object.keys(created).sort()).toEqual(['events', 'id', 'rootId', 'secret', 'url']);
    expect(created.secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(created).toMatchObject({ url: hook.url, events: ['turn.ended'], rootId: null });
    const list = json<{ items: Record<string, unknown>[] }>(await h.app.inject({ method: 'GET', url: '/v1/webhooks' }));
    expect(list.items).toHaveLength(1);
    expect(list.items[0]).not.toHaveProperty('secret');
    expect(JSON.stringify(list)).not.toContain(created.secret.slice(6));
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/webhooks/${created.id}` })).statusCode).toBe(204);
    expect((await h.app.inject({ method: 'GET', url: `/v1/webhooks/${created.id}` })).json()).toMatchObject({ code: 'WEBHOOK_NOT_FOUND' });
  });

  it('refuses URLs that are not http(s), carry credentials, or (by default) name a private address', async () => {
    const h = await startHarness();
    for (const url of ['ftp://example.com/x', 'http://user:hunter2@example.com/x', 'http://127.0.0.1:9/x', 'http://[::1]/x', 'http://10.1.2.3/x', 'http://169.254.169.254/latest']) {
      const res = await subscribe(h, { url, events: ['turn.ended'] });
      expect(res.statusCode, url).toBe(400);
      expect(res.body).not.toContain('hunter2');
    }
    expect((await subscribe(h, { url: 'http://localhost:9/x', events: ['turn.ended'] })).statusCode).toBe(400);
    expect((await subscribe(h, { url: 'https://example.com/x', events: [] })).statusCode).toBe(400);
    expect((await subscribe(h, { url: 'https://example.com/x', events: ['nope'] })).statusCode).toBe(400);
    expect((await subscribe(h, { url: 'http://127.0.0.1:9/x', events: ['turn.ended'], secret: 'plain' })).statusCode).toBe(400);
  });
});

describe('webhook delivery', () => {
  it('delivers turn.ended signed so that the standardwebhooks verifier accepts it, with the payload {type, timestamp, data}', async () => {
    const h = await startHarness({ webhooks: FAST });
    const hook = await receiver();
    const { secret, id } = json<{ secret: string; id: string }>(await subscribe(h, { url: hook.url, events: ['turn.ended'] }));
    const root = await createRoot(h.app);
    await oneTurn(h, root);
    await until(() => hook.received.length === 1, 'the turn.ended delivery', { timeoutMs: 5000 });
    const [got] = hook.received;
    const verified = new Webhook(secret).verify(got!.body, got!.headers as Record<string, string>) as { type: string; timestamp: string; data: Record<string, unknown> };
    expect(verified).toMatchObject({ type: 'turn.ended', data: { agentId: root.id, rootId: root.id, reason: 'completed' } });
    expect(Date.parse(verified.timestamp)).not.toBeNaN();
    expect(() => new Webhook(secret).verify(got!.body.replace('completed', 'cancelled'), got!.headers as Record<string, string>)).toThrow();
    await until(async () => json<{ items: { state: string }[] }>(await h.app.inject({ method: 'GET', url: `/v1/webhooks/${id}/deliveries` })).items[0]?.state === 'delivered', 'delivered state', { timeoutMs: 5000 });
    const page = json<{ items: { id: string; attempts: number; lastStatus: number }[] }>(await h.app.inject({ method: 'GET', url: `/v1/webhooks/${id}/deliveries` }));
    expect(page.items[0]).toMatchObject({ id: got!.headers['webhook-id'], attempts: 1, lastStatus: 200 });
  });

  it('retries a receiver that answers 500 with the same webhook-id until it answers 200', async () => {
    const h = await startHarness({ webhooks: FAST });
    const hook = await receiver((n, res) => {
      res.statusCode = n < 2 ? 500 : 200;
      res.end();
    });
    const { id } = json<{ id: string }>(await subscribe(h, { url: hook.url, events: ['turn.ended'] }));
    const root = await createRoot(h.app);
    await oneTurn(h, root);
    await until(() => hook.received.length === 3, 'two retries', { timeoutMs: 5000 });
    expect(new Set(hook.received.map((r) => r.headers['webhook-id'])).size).toBe(1);
    await until(async () => json<{ items: { state: string }[] }>(await h.app.inject({ method: 'GET', url: `/v1/webhooks/${id}/deliveries` })).items[0]?.state === 'delivered', 'delivered', { timeoutMs: 5000 });
    const [delivery] = json<{ items: { attempts: number; lastStatus: number }[] }>(await h.app.inject({ method: 'GET', url: `/v1/webhooks/${id}/deliveries` })).items;
    expect(delivery).toMatchObject({ attempts: 3, lastStatus: 200 });
  });

  it('gives a delivery up after its retry window, shows it failed, and sends it again on a retry request', async () => {
    let healthy = false;
    const h = await startHarness({ webhooks: { ...FAST, maxAgeMs: 150 } });
    const hook = await receiver((_n, res) => {
      res.statusCode = healthy ? 204 : 503;
      res.end();
    });
    const { id } = json<{ id: string }>(await subscribe(h, { url: hook.url, events: ['turn.ended'] }));
    await oneTurn(h, await createRoot(h.app));
    const failed = async () => json<{ items: { id: string; state: string; lastStatus: number; lastError: string }[] }>(
      await h.app.inject({ method: 'GET', url: `/v1/webhooks/${id}/deliveries?state=failed` }),
    ).items;
    await until(async () => (await failed()).length === 1, 'the delivery given up', { timeoutMs: 5000 });
    const [gaveUp] = await failed();
    expect(gaveUp).toMatchObject({ state: 'failed', lastStatus: 503 });
    const sent = hook.received.length;
    healthy = true;
    const retry = await h.app.inject({ method: 'POST', url: `/v1/webhooks/${id}/deliveries/${gaveUp!.id}/retry` });
    expect(retry.statusCode).toBe(202);
    await until(() => hook.received.length === sent + 1, 'the retried delivery', { timeoutMs: 5000 });
    expect(hook.received.at(-1)!.headers['webhook-id']).toBe(gaveUp!.id);
    expect((await h.app.inject({ method: 'POST', url: `/v1/webhooks/${id}/deliveries/evt_nope/retry` })).json()).toMatchObject({ code: 'DELIVERY_NOT_FOUND' });
  });

  it('a slow receiver does not delay another subscription', async () => {
    const h = await startHarness({ webhooks: FAST });
    const held: ServerResponse[] = [];
    const slow = await receiver((_n, res) => held.push(res));
    const fast = await receiver();
    await subscribe(h, { url: slow.url, events: ['turn.ended'] });
    await subscribe(h, { url: fast.url, events: ['turn.ended'] });
    const root = await createRoot(h.app);
    await oneTurn(h, root);
    await oneTurn(h, root);
    await until(() => fast.received.length === 2, 'both deliveries to the fast receiver', { timeoutMs: 5000 });
    // The slow one has its first delivery in flight and, in order, nothing after it yet.
    expect(slow.received).toHaveLength(1);
    for (const res of held) res.end();
    await until(() => slow.received.length === 2, 'the slow receiver catching up in order', { timeoutMs: 5000 });
    const order = (r: Receiver) => r.received.map((x) => (JSON.parse(x.body) as { data: { forestSeq: number } }).data.forestSeq);
    expect(order(slow)).toEqual(order(fast));
  });

  it('delivers report.delivered naming the child, the parent and the message id the report returned', async () => {
    const h = await startHarness({ webhooks: FAST });
    const hook = await receiver();
    await subscribe(h, { url: hook.url, events: ['report.delivered'] });
    const root = await createRoot(h.app);
    const child = await startChild(h, root);
    const res = await callReport(h, child, 'found it');
    const messageId = (json<{ result?: { messageId?: string } }>(res) as Record<string, unknown>);
    await until(() => hook.received.length === 1, 'the report.delivered delivery', { timeoutMs: 5000 });
    const payload = JSON.parse(hook.received[0]!.body) as { type: string; data: { from: string; to: string; messageId: string } };
    expect(payload).toMatchObject({ type: 'report.delivered', data: { from: child.id, to: root.id } });
    expect(JSON.stringify(messageId)).toContain(payload.data.messageId);
  });

  it('delivers tool.call_requested for a call of a declared backend tool, with its effect key', async () => {
    const h = await startHarness({ webhooks: FAST });
    const hook = await receiver();
    await subscribe(h, { url: hook.url, events: ['tool.call_requested'] });
    const declared = await h.app.inject({ method: 'PUT', url: '/v1/backend-tools/crm_lookup', payload: { description: 'Looks a customer up.', parameters: { type: 'object' } } });
    expect(declared.statusCode).toBe(200);
    const root = await createRoot(h.app, { tools: ['crm_lookup'] });
    await send(h.app, root.id, 'who is ann?');
    const step = await claim(h.app, root);
    await postOutput(h.app, root, step!.id, { toolCalls: [{ id: 'c1', name: 'crm_lookup', input: { email: 'ann@example.com' } }, { id: 'c2', name: 'own_tool', input: {} }] });
    await until(() => hook.received.length === 1, 'the tool.call_requested delivery', { timeoutMs: 5000 });
    const log = await session(h.app, root.id);
    const effectKey = log.find((e) => e.role === 'assistant')!.toolCalls![0]!.effectKey;
    expect(JSON.parse(hook.received[0]!.body)).toMatchObject({
      type: 'tool.call_requested',
      data: { agentId: root.id, rootId: root.id, stepId: step!.id, toolCallId: 'c1', name: 'crm_lookup', effectKey },
    });
    // A call of a tool the backend did not declare is not one.
    const deliveries = json<{ items: unknown[] }>(await h.app.inject({ method: 'GET', url: `/v1/webhooks/${json<{ items: { id: string }[] }>(await h.app.inject({ method: 'GET', url: '/v1/webhooks' })).items[0]!.id}/deliveries` })).items;
    expect(deliveries).toHaveLength(1);
  });

  it('delivers approval.requested with the approval, and approval.decided once a person decided', async () => {
    const h = await startHarness({ webhooks: FAST });
    const hook = await receiver();
    await subscribe(h, { url: hook.url, events: ['approval.requested', 'approval.decided'] });
    expect((await h.app.inject({ method: 'PUT', url: '/v1/approval-rules/spawns', payload: { tool: 'spawn_subagent', decision: 'ask' } })).statusCode).toBe(200);
    const root = await createRoot(h.app);
    await send(h.app, root.id, 'dig');
    const step = await claim(h.app, root);
    const out = json<{ approvals: { id: string }[] }>(await postOutput(h.app, root, step!.id, { toolCalls: [{ id: 'c1', name: 'spawn_subagent', input: { prompt: 'x' } }] }));
    const approvalId = out.approvals[0]!.id;
    await until(() => hook.received.length === 1, 'the approval.requested delivery', { timeoutMs: 5000 });
    expect(JSON.parse(hook.received[0]!.body)).toMatchObject({
      type: 'approval.requested',
      data: { id: approvalId, state: 'pending', rootId: root.id, agentId: root.id, path: [root.id], stepId: step!.id, toolCallId: 'c1', tool: 'spawn_subagent' },
    });
    expect((await h.app.inject({ method: 'POST', url: `/v1/approvals/${approvalId}/decision`, payload: { decision: 'deny', reason: 'not now' } })).statusCode).toBe(200);
    await until(() => hook.received.length === 2, 'the approval.decided delivery', { timeoutMs: 5000 });
    expect(JSON.parse(hook.received[1]!.body)).toMatchObject({ type: 'approval.decided', data: { id: approvalId, state: 'denied', reason: 'not now' } });
  });
});
