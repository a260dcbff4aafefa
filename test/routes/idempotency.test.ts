/**
 * `Idempotency-Key` over HTTP (`app.inject()`) on messages, child creation and tool calls:
 * replay (same status, same body, `idempotent-replayed: true`, no second delivery), conflict,
 * expiry after the TTL, keys scoped by sender, concurrent requests with one key, failed calls
 * not recorded, key validation, and durability of keys across a restart on one SQLite file
 * and across a crash (a key and the effect it describes commit together or not at all).
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { LightMyRequestResponse } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { ChildCreated, ErrorBody, MessageAccepted, ToolCallResult } from '../../src/contract/index.js';
import { buildApp } from '../../src/app.js';
import { fixedClock, type Clock } from '../../src/domain/ports.js';
import { createLogger } from '../../src/logger.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import { SqliteSessionStore } from '../../src/adapters/sqlite/sqlite-store.js';
import { Probe } from '../fixtures/probe.js';
import { createSystem } from '../../src/composition/system.js';
import {
  claim,
  createRoot,
  postOutput,
  session,
  startHarness,
  until,
  type CreatedRoot,
  type Entry,
  type Harness,
  resumeRoot,
} from '../fixtures/harness.js';
import { closeWithTest, once, tempDir } from '../fixtures/cleanup.js';
import { CrashingStore } from '../fixtures/crashing-store.js';

/** A tool call's answer, its `output` (unknown on the wire) read as the tools these tests call return it. */
type ToolCallAnswer = Omit<ToolCallResult, 'output'> & { output: { messageId?: string; subagent_id?: string } };

const DAY_MS = 24 * 60 * 60 * 1000;

/** The app exactly as test/fixtures/harness.ts builds it, with an idempotency TTL of our choosing. */
async function openWithTtl(idempotencyTtlMs: number, clock: Clock): Promise<Harness> {
  const logger = createLogger('silent');
  const store = new MemorySessionStore();
  const probe = new Probe();
  const system = createSystem({ store, logger, clock, idempotencyTtlMs, observers: [probe.observer] });
  const app = await buildApp({ system, logger, apiKeys: [] });
  await app.ready();
  const close = once(async () => {
    await app.close();
    await system.roots.shutdown();
    await store.close();
  });
  closeWithTest(close);
  return { app, system, probe, close };
}

function tempDb(): string {
  const dir = tempDir('agentforest-idempotency-');
  return join(dir, 'agentforest.db');
}

function headers(key: string | undefined, token?: string): Record<string, string> {
  return { ...(key === undefined ? {} : { 'idempotency-key': key }), ...(token === undefined ? {} : { 'x-agent-token': token }) };
}

function message(h: Harness, id: string, content: string, delivery: string, key?: string, token?: string): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${id}/messages`, headers: headers(key, token), payload: { content, delivery } });
}

function createChild(h: Harness, parent: CreatedRoot, prompt: string, key?: string): Promise<LightMyRequestResponse> {
  return h.app.inject({
    method: 'POST',
    url: `/v1/agents/${parent.id}/children`,
    headers: headers(key, parent.token),
    payload: { mode: 'continuable', prompt },
  });
}

function toolCall(h: Harness, agent: CreatedRoot, name: string, input: unknown, key?: string): Promise<LightMyRequestResponse> {
  return h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/tool-calls`, headers: headers(key, agent.token), payload: { name, input } });
}

async function child(h: Harness, parent: CreatedRoot, prompt = 'child task'): Promise<CreatedRoot> {
  const res = await createChild(h, parent, prompt);
  if (res.statusCode !== 201) throw new Error(`create child failed: ${res.statusCode} ${res.body}`);
  const body = res.json() as ChildCreated;
  return { id: body.agent.id, token: body.agentToken };
}

async function childIds(h: Harness, parentId: string): Promise<string[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents?parentId=${parentId}` });
  return (res.json() as { items: { id: string }[] }).items.map((v) => v.id);
}

async function resident(h: Harness, id: string): Promise<boolean> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  return (res.json() as { resident: boolean }).resident;
}

/** Runs the agent's open turn to its end with a plain answer. */
async function finishTurn(h: Harness, agent: CreatedRoot): Promise<void> {
  const step = await claim(h.app, agent, 5000);
  if (step === null) throw new Error(`no step for ${agent.id}`);
  const res = await postOutput(h.app, agent, step.id, { content: 'done' });
  expect(res.json()).toMatchObject({ turn: 'ended' });
}

function replayed(res: LightMyRequestResponse): boolean {
  return res.headers['idempotent-replayed'] === 'true';
}

function messagesWithId(entries: readonly Entry[], messageId: string): Entry[] {
  return entries.filter((e) => e.type === 'message' && e.messageId === messageId);
}

function userMessages(entries: readonly Entry[], text: string): Entry[] {
  return entries.filter((e) => e.type === 'message' && e.role === 'user' && (e.content ?? []).some((b) => b.text === text));
}

function reportsIn(entries: readonly Entry[]): Entry[] {
  return entries.filter((e) => e.type === 'message' && (e['source'] as { kind?: string } | undefined)?.kind === 'subagent-report');
}

describe('Idempotency-Key on messages to a root', () => {
  it('a retried followup returns the original 202 and messageId, marked replayed, and queues no second turn', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });

    const first = await message(h, root.id, 'do it once', 'followup', 'k-1');
    const retry = await message(h, root.id, 'do it once', 'followup', 'k-1');

    expect(first.statusCode).toBe(202);
    expect(replayed(first)).toBe(false);
    expect(retry.statusCode).toBe(202);
    expect(replayed(retry)).toBe(true);
    expect(retry.json()).toEqual(first.json());
    await finishTurn(h, root);
    expect(await claim(h.app, root)).toBeNull();
    expect(userMessages(await session(h.app, root.id), 'do it once')).toHaveLength(1);
  });

  it('the same key with a different body, delivery or recipient is 409 IDEMPOTENCY_CONFLICT and delivers nothing', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const other = await createRoot(h.app, { id: 'other' });
    expect((await message(h, root.id, 'context', 'inject', 'k-1')).statusCode).toBe(202);

    for (const res of [
      await message(h, root.id, 'different context', 'inject', 'k-1'),
      await message(h, root.id, 'context', 'followup', 'k-1'),
      await message(h, other.id, 'context', 'inject', 'k-1'),
    ]) {
      expect(res.statusCode).toBe(409);
      expect((res.json() as ErrorBody).code).toBe('IDEMPOTENCY_CONFLICT');
    }
    expect((await session(h.app, root.id)).filter((e) => e.type === 'message')).toHaveLength(1);
    expect(await session(h.app, other.id)).toEqual([]);
  });

  it('requests without a key are never deduplicated', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const a = await message(h, root.id, 'same', 'inject');
    const b = await message(h, root.id, 'same', 'inject');
    expect((a.json() as MessageAccepted).messageId).not.toBe((b.json() as MessageAccepted).messageId);
    expect(userMessages(await session(h.app, root.id), 'same')).toHaveLength(2);
  });
});

describe('Idempotency-Key on messages to a child', () => {
  it("a parent's retried followup to its running child replays the messageId and inbox item and queues once", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const c = await child(h, root);

    const first = await message(h, c.id, 'more work', 'followup', 'k-1', root.token);
    const retry = await message(h, c.id, 'more work', 'followup', 'k-1', root.token);

    expect(first.statusCode).toBe(202);
    expect(retry.statusCode).toBe(202);
    expect(replayed(retry)).toBe(true);
    expect(retry.json()).toEqual(first.json());
    expect((first.json() as MessageAccepted).inboxItemId).toEqual(expect.any(String));
    const view = await h.app.inject({ method: 'GET', url: `/v1/agents/${c.id}` });
    expect((view.json() as { inbox: { queued: number } }).inbox.queued).toBe(1);
  });

  it("a replayed message that cold-resumed a child names the child's current token, then '' once it settled, and never resumes it again", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const c = await child(h, root);
    await finishTurn(h, c);
    await until(async () => !(await resident(h, c.id)), 'the child settles');

    const first = await message(h, c.id, 'wake up', 'followup', 'k-1', root.token);
    const token = (first.json() as MessageAccepted).resumed?.agentToken;
    expect(token).toEqual(expect.stringMatching(/.+/));
    const whileResident = await message(h, c.id, 'wake up', 'followup', 'k-1', root.token);
    expect(replayed(whileResident)).toBe(true);
    expect(whileResident.json()).toEqual(first.json());

    await finishTurn(h, { id: c.id, token: token ?? '' });
    await until(async () => !(await resident(h, c.id)), 'the child settles again');
    const activationsBefore = (await session(h.app, c.id)).filter((e) => e.type === 'activation').length;
    const afterSettling = await message(h, c.id, 'wake up', 'followup', 'k-1', root.token);

    expect(afterSettling.statusCode).toBe(202);
    expect(replayed(afterSettling)).toBe(true);
    expect(afterSettling.json()).toEqual({ ...(first.json() as MessageAccepted), resumed: { agentToken: '' } });
    expect(await resident(h, c.id)).toBe(false);
    expect((await session(h.app, c.id)).filter((e) => e.type === 'activation')).toHaveLength(activationsBefore);
    expect(userMessages(await session(h.app, c.id), 'wake up')).toHaveLength(1);
  });

  it('a message to a child with the same key but another body is 409 IDEMPOTENCY_CONFLICT', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const c = await child(h, root);
    expect((await message(h, c.id, 'one', 'inject', 'k-1', root.token)).statusCode).toBe(202);
    const res = await message(h, c.id, 'two', 'inject', 'k-1', root.token);
    expect(res.statusCode).toBe(409);
    expect((res.json() as ErrorBody).code).toBe('IDEMPOTENCY_CONFLICT');
    expect(userMessages(await session(h.app, c.id), 'two')).toEqual([]);
  });
});

describe('Idempotency-Key on child creation', () => {
  it('a retried child creation returns the same 201 body with the child\'s current token and creates no second child', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });

    const first = await createChild(h, root, 'research', 'k-1');
    const retry = await createChild(h, root, 'research', 'k-1');

    expect(first.statusCode).toBe(201);
    expect(retry.statusCode).toBe(201);
    expect(replayed(first)).toBe(false);
    expect(replayed(retry)).toBe(true);
    expect(retry.json()).toEqual(first.json());
    expect(await childIds(h, root.id)).toEqual([(first.json() as ChildCreated).agent.id]);
  });

  it('a replayed child creation answers an empty token once the child is no longer resident, and the stored key holds no token', async () => {
    const clock = fixedClock();
    const h = await startHarness({ clock });
    const root = await createRoot(h.app, { id: 'r' });
    const first = (await createChild(h, root, 'research', 'k-1')).json() as ChildCreated;
    const stored = await h.system.store.idempotency(root.id, 'k-1', clock.now());
    expect(stored).toBeDefined();
    expect(JSON.stringify(stored)).not.toContain(first.agentToken);

    await finishTurn(h, { id: first.agent.id, token: first.agentToken });
    await until(async () => !(await resident(h, first.agent.id)), 'the child settles');
    const retry = await createChild(h, root, 'research', 'k-1');

    expect(retry.statusCode).toBe(201);
    expect(replayed(retry)).toBe(true);
    expect(retry.json()).toEqual({ ...first, agentToken: '' });
    expect(await resident(h, first.agent.id)).toBe(false);
    expect(await childIds(h, root.id)).toEqual([first.agent.id]);
  });

  it('the same key with another prompt is 409 IDEMPOTENCY_CONFLICT and creates nothing', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const first = (await createChild(h, root, 'research', 'k-1')).json() as ChildCreated;
    const res = await createChild(h, root, 'something else', 'k-1');
    expect(res.statusCode).toBe(409);
    expect((res.json() as ErrorBody).code).toBe('IDEMPOTENCY_CONFLICT');
    expect(await childIds(h, root.id)).toEqual([first.agent.id]);
  });
});

describe('Idempotency-Key on tool calls', () => {
  it("two identical report calls with one key leave exactly one report in the parent's session", async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const c = await child(h, root);

    const first = await toolCall(h, c, 'report', { output: 'finding' }, 'k-1');
    const retry = await toolCall(h, c, 'report', { output: 'finding' }, 'k-1');

    expect(first.statusCode).toBe(200);
    expect(retry.statusCode).toBe(200);
    expect(replayed(retry)).toBe(true);
    expect(retry.json()).toEqual(first.json());
    const reports = reportsIn(await session(h.app, root.id));
    expect(reports.map((e) => e.messageId)).toEqual([(first.json() as ToolCallAnswer).output.messageId]);
  });

  it('a failed report is not recorded: a retry with the same key runs again and delivers once', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const c = await child(h, root);
    const disposed = await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}?cascade=false` });
    expect(disposed.statusCode).toBe(202);

    const failed = await toolCall(h, c, 'report', { output: 'finding' }, 'k-1');
    expect(failed.statusCode).toBe(409);
    expect((failed.json() as ErrorBody).code).toBe('PARENT_UNAVAILABLE');

    await resumeRoot(h, root.id);
    const retry = await toolCall(h, c, 'report', { output: 'finding' }, 'k-1');

    expect(retry.statusCode).toBe(200);
    expect(replayed(retry)).toBe(false);
    expect(reportsIn(await session(h.app, root.id)).map((e) => e.messageId)).toEqual([(retry.json() as ToolCallAnswer).output.messageId]);
  });

  it('a report with the same key but another output is 409 IDEMPOTENCY_CONFLICT and is not delivered', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const c = await child(h, root);
    expect((await toolCall(h, c, 'report', { output: 'first' }, 'k-1')).statusCode).toBe(200);
    const res = await toolCall(h, c, 'report', { output: 'second' }, 'k-1');
    expect(res.statusCode).toBe(409);
    expect((res.json() as ErrorBody).code).toBe('IDEMPOTENCY_CONFLICT');
    expect(reportsIn(await session(h.app, root.id))).toHaveLength(1);
  });

  it('a replayed spawn_subagent call starts no second child and names the resident child\'s current token', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const first = await toolCall(h, root, 'spawn_subagent', { prompt: 'look around' }, 'k-1');
    const retry = await toolCall(h, root, 'spawn_subagent', { prompt: 'look around' }, 'k-1');
    const spawned = (first.json() as ToolCallAnswer).output.subagent_id ?? '';

    expect(first.statusCode).toBe(200);
    expect(replayed(retry)).toBe(true);
    expect((retry.json() as ToolCallAnswer).output).toEqual({ subagent_id: spawned });
    const firstToken = (first.json() as ToolCallAnswer).spawned?.[0]?.agentToken;
    expect(firstToken).toEqual(expect.any(String));
    expect((retry.json() as ToolCallAnswer).spawned).toEqual([{ agentId: spawned, agentToken: firstToken }]);
    expect(await childIds(h, root.id)).toEqual([spawned]);
  });
});

describe('expiry', () => {
  it('within the TTL a key replays; after it the same request runs again as a new one', async () => {
    const clock = fixedClock();
    const h = await openWithTtl(60_000, clock);
    const root = await createRoot(h.app, { id: 'r' });
    const first = (await message(h, root.id, 'note', 'inject', 'k-1')).json() as MessageAccepted;

    clock.advance(59_999);
    const within = await message(h, root.id, 'note', 'inject', 'k-1');
    expect(replayed(within)).toBe(true);
    expect((within.json() as MessageAccepted).messageId).toBe(first.messageId);

    clock.advance(2);
    const after = await message(h, root.id, 'note', 'inject', 'k-1');
    expect(after.statusCode).toBe(202);
    expect(replayed(after)).toBe(false);
    const second = (after.json() as MessageAccepted).messageId;
    expect(second).not.toBe(first.messageId);
    expect(userMessages(await session(h.app, root.id), 'note').map((e) => e.messageId)).toEqual([first.messageId, second]);
  });

  it('an expired key no longer conflicts: another body with it is accepted, and expire() drops it', async () => {
    const clock = fixedClock();
    const h = await openWithTtl(1000, clock);
    const root = await createRoot(h.app, { id: 'r' });
    expect((await message(h, root.id, 'one', 'inject', 'k-1')).statusCode).toBe(202);
    expect(await h.system.idempotency.expire()).toBe(0);

    clock.advance(1001);
    expect(await h.system.idempotency.expire()).toBe(1);
    const res = await message(h, root.id, 'two', 'inject', 'k-1');
    expect(res.statusCode).toBe(202);
    expect(replayed(res)).toBe(false);
  });

  it('keys are kept for 24 hours by default', async () => {
    const clock = fixedClock();
    const h = await startHarness({ clock });
    const root = await createRoot(h.app, { id: 'r' });
    const first = (await createChild(h, root, 'research', 'k-1')).json() as ChildCreated;

    clock.advance(DAY_MS - 1);
    expect(replayed(await createChild(h, root, 'research', 'k-1'))).toBe(true);
    clock.advance(2);
    const after = await createChild(h, root, 'research', 'k-1');

    expect(after.statusCode).toBe(201);
    expect(replayed(after)).toBe(false);
    const second = (after.json() as ChildCreated).agent.id;
    expect(second).not.toBe(first.agent.id);
    expect(await childIds(h, root.id)).toEqual([first.agent.id, second]);
  });
});

describe('keys are scoped by sender', () => {
  it("two roots' child creations with the same key and body each create their own child", async () => {
    const h = await startHarness();
    const a = await createRoot(h.app, { id: 'a' });
    const b = await createRoot(h.app, { id: 'b' });

    const fromA = await createChild(h, a, 'research', 'shared');
    const fromB = await createChild(h, b, 'research', 'shared');

    expect([fromA.statusCode, fromB.statusCode]).toEqual([201, 201]);
    expect([replayed(fromA), replayed(fromB)]).toEqual([false, false]);
    const childA = (fromA.json() as ChildCreated).agent.id;
    const childB = (fromB.json() as ChildCreated).agent.id;
    expect(childA).not.toBe(childB);
    expect(await childIds(h, a.id)).toEqual([childA]);
    expect(await childIds(h, b.id)).toEqual([childB]);
  });

  it('children of two roots reporting with the same key each deliver to their own parent', async () => {
    const h = await startHarness();
    const a = await createRoot(h.app, { id: 'a' });
    const b = await createRoot(h.app, { id: 'b' });
    const childA = await child(h, a);
    const childB = await child(h, b);

    const fromA = await toolCall(h, childA, 'report', { output: 'same' }, 'shared');
    const fromB = await toolCall(h, childB, 'report', { output: 'same' }, 'shared');

    expect([replayed(fromA), replayed(fromB)]).toEqual([false, false]);
    expect(reportsIn(await session(h.app, a.id)).map((e) => e.messageId)).toEqual([(fromA.json() as ToolCallAnswer).output.messageId]);
    expect(reportsIn(await session(h.app, b.id)).map((e) => e.messageId)).toEqual([(fromB.json() as ToolCallAnswer).output.messageId]);
  });

  it('the operator and an agent using the same key each get their own result, and each replays its own', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });

    const fromOperator = await message(h, root.id, 'note', 'inject', 'shared');
    const fromAgent = await createChild(h, root, 'research', 'shared');

    expect(fromOperator.statusCode).toBe(202);
    expect(fromAgent.statusCode).toBe(201);
    expect(replayed(fromAgent)).toBe(false);
    const operatorRetry = await message(h, root.id, 'note', 'inject', 'shared');
    const agentRetry = await createChild(h, root, 'research', 'shared');
    expect(operatorRetry.json()).toEqual(fromOperator.json());
    expect(agentRetry.json()).toEqual(fromAgent.json());
    expect([replayed(operatorRetry), replayed(agentRetry)]).toEqual([true, true]);
  });

  it('a root whose id is "operator" does not share its keys with the operator', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'operator' });
    expect((await message(h, root.id, 'note', 'inject', 'shared')).statusCode).toBe(202);

    const fromAgent = await createChild(h, root, 'research', 'shared');

    expect(fromAgent.statusCode).toBe(201);
    expect(replayed(fromAgent)).toBe(false);
    expect(await childIds(h, root.id)).toHaveLength(1);
  });
});

describe('concurrent requests with one key', () => {
  it('two concurrent messages with one key deliver once and both answer with the same messageId', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });

    const [a, b] = await Promise.all([message(h, root.id, 'once', 'inject', 'k-1'), message(h, root.id, 'once', 'inject', 'k-1')]);

    expect([a.statusCode, b.statusCode]).toEqual([202, 202]);
    expect((a.json() as MessageAccepted).messageId).toBe((b.json() as MessageAccepted).messageId);
    expect([a, b].filter(replayed)).toHaveLength(1);
    expect(userMessages(await session(h.app, root.id), 'once')).toHaveLength(1);
  });

  it('two concurrent child creations with one key create one child', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });

    const [a, b] = await Promise.all([createChild(h, root, 'research', 'k-1'), createChild(h, root, 'research', 'k-1')]);

    expect([a.statusCode, b.statusCode]).toEqual([201, 201]);
    expect((a.json() as ChildCreated).messageId).toBe((b.json() as ChildCreated).messageId);
    expect([a, b].filter(replayed)).toHaveLength(1);
    expect(await childIds(h, root.id)).toEqual([(a.json() as ChildCreated).agent.id]);
  });

  it('two concurrent reports with one key deliver one report', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const c = await child(h, root);

    const [a, b] = await Promise.all([toolCall(h, c, 'report', { output: 'x' }, 'k-1'), toolCall(h, c, 'report', { output: 'x' }, 'k-1')]);

    expect([a.statusCode, b.statusCode]).toEqual([200, 200]);
    const messageId = (a.json() as ToolCallAnswer).output.messageId;
    expect((b.json() as ToolCallAnswer).output.messageId).toBe(messageId);
    expect([a, b].filter(replayed)).toHaveLength(1);
    expect(reportsIn(await session(h.app, root.id)).map((e) => e.messageId)).toEqual([messageId]);
  });

  it('a concurrent request with the same key and another body waits for the first and then conflicts', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });

    const [a, b] = await Promise.all([message(h, root.id, 'one', 'inject', 'k-1'), message(h, root.id, 'two', 'inject', 'k-1')]);

    expect(a.statusCode).toBe(202);
    expect(b.statusCode).toBe(409);
    expect((b.json() as ErrorBody).code).toBe('IDEMPOTENCY_CONFLICT');
    expect((await session(h.app, root.id)).filter((e) => e.type === 'message')).toHaveLength(1);
  });
});

describe('key validation', () => {
  const invalid: [string, string][] = [
    ['129 characters', 'k'.repeat(129)],
    ['a space', 'has space'],
    ['no characters', ''],
  ];

  it.each(invalid)('a key of %s is 400 VALIDATION on messages, child creation and tool calls, and nothing happens', async (_what, key) => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const c = await child(h, root);
    const rootBefore = await session(h.app, root.id);
    const childBefore = await session(h.app, c.id);

    for (const res of [
      await message(h, root.id, 'note', 'inject', key),
      await message(h, c.id, 'note', 'inject', key, root.token),
      await createChild(h, root, 'another', key),
      await toolCall(h, c, 'report', { output: 'x' }, key),
    ]) {
      expect(res.statusCode).toBe(400);
      expect((res.json() as ErrorBody).code).toBe('VALIDATION');
    }
    expect(await session(h.app, root.id)).toEqual(rootBefore);
    expect(await session(h.app, c.id)).toEqual(childBefore);
    expect(await childIds(h, root.id)).toEqual([c.id]);
  });

  it('a key of 128 printable ASCII characters is accepted and replays', async () => {
    const h = await startHarness();
    const root = await createRoot(h.app, { id: 'r' });
    const key = `!~${'a'.repeat(126)}`;
    const first = await message(h, root.id, 'note', 'inject', key);
    const retry = await message(h, root.id, 'note', 'inject', key);
    expect(first.statusCode).toBe(202);
    expect(replayed(retry)).toBe(true);
    expect(retry.json()).toEqual(first.json());
  });
});

describe('durability of keys', () => {
  it('replays and conflicts survive a restart on the same SQLite file, and no token is stored', async () => {
    const path = tempDb();
    const h1 = await startHarness({ store: new SqliteSessionStore({ path }) });
    const root1 = await createRoot(h1.app, { id: 'r' });
    const sent = await message(h1, root1.id, 'before restart', 'followup', 'msg-key');
    const created = await createChild(h1, root1, 'research', 'child-key');
    const firstChild = created.json() as ChildCreated;
    await h1.close();

    const h2 = await startHarness({ store: new SqliteSessionStore({ path }) });
    const root2 = await resumeRoot(h2, root1.id);
    const sentAgain = await message(h2, root2.id, 'before restart', 'followup', 'msg-key');
    const conflict = await message(h2, root2.id, 'another body', 'followup', 'msg-key');
    const createdAgain = await createChild(h2, root2, 'research', 'child-key');

    expect(sentAgain.statusCode).toBe(202);
    expect(replayed(sentAgain)).toBe(true);
    expect(sentAgain.json()).toEqual(sent.json());
    expect(conflict.statusCode).toBe(409);
    expect((conflict.json() as ErrorBody).code).toBe('IDEMPOTENCY_CONFLICT');
    expect(createdAgain.statusCode).toBe(201);
    expect(replayed(createdAgain)).toBe(true);
    expect(createdAgain.json()).toEqual({ ...firstChild, agentToken: '' });
    expect(await childIds(h2, root2.id)).toEqual([firstChild.agent.id]);
    expect(messagesWithId(await session(h2.app, root2.id), (sent.json() as MessageAccepted).messageId)).toHaveLength(1);
    expect(await claim(h2.app, root2)).toBeNull();
    await h2.close();

    const db = new Database(path, { readonly: true });
    try {
      const rows = db.prepare<[], { response: string }>('SELECT response FROM idempotency').all();
      expect(rows).toHaveLength(2);
      for (const row of rows) {
        for (const token of [root1.token, firstChild.agentToken, root2.token]) expect(row.response).not.toContain(token);
      }
    } finally {
      db.close();
    }
  });

  it('a crash cannot separate a report from its key: the retry after the restart delivers exactly once', async () => {
    const store = new MemorySessionStore();
    const crashing = new CrashingStore(store, (batch) => (batch.idempotency?.length ?? 0) > 0);
    const h1 = await startHarness({ store: crashing });
    const root1 = await createRoot(h1.app, { id: 'r' });
    const c1 = await child(h1, root1);
    await toolCall(h1, c1, 'report', { output: 'finding' }, 'k-1');
    expect(crashing.crashed).toBe(true);
    await h1.close();

    const h2 = await startHarness({ store });
    const root2 = await resumeRoot(h2, root1.id);
    expect(reportsIn(await session(h2.app, root2.id))).toEqual([]);
    const woke = await message(h2, c1.id, 'go on', 'followup', undefined, root2.token);
    const c2 = { id: c1.id, token: (woke.json() as MessageAccepted).resumed?.agentToken ?? '' };
    const retry = await toolCall(h2, c2, 'report', { output: 'finding' }, 'k-1');

    expect(retry.statusCode).toBe(200);
    expect(reportsIn(await session(h2.app, root2.id))).toHaveLength(1);
  });

  it('a crash cannot separate a spawn_subagent child from its key: the retry after the restart leaves exactly one child', async () => {
    const store = new MemorySessionStore();
    const crashing = new CrashingStore(store, (batch) => (batch.idempotency?.length ?? 0) > 0);
    const h1 = await startHarness({ store: crashing });
    const root1 = await createRoot(h1.app, { id: 'r' });
    await toolCall(h1, root1, 'spawn_subagent', { prompt: 'look around' }, 'k-1');
    expect(crashing.crashed).toBe(true);
    await h1.close();

    const h2 = await startHarness({ store });
    const root2 = await resumeRoot(h2, root1.id);
    const retry = await toolCall(h2, root2, 'spawn_subagent', { prompt: 'look around' }, 'k-1');

    expect(retry.statusCode).toBe(200);
    expect(await childIds(h2, root2.id)).toHaveLength(1);
  });

  it('a crash cannot separate a created child from its key: the retry after the restart leaves exactly one child', async () => {
    const store = new MemorySessionStore();
    const crashing = new CrashingStore(store, (batch) => (batch.idempotency?.length ?? 0) > 0);
    const h1 = await startHarness({ store: crashing });
    const root1 = await createRoot(h1.app, { id: 'r' });
    await createChild(h1, root1, 'research', 'k-1');
    expect(crashing.crashed).toBe(true);
    await h1.close();

    const h2 = await startHarness({ store });
    const root2 = await resumeRoot(h2, root1.id);
    expect(await childIds(h2, root2.id)).toEqual([]);
    const retry = await createChild(h2, root2, 'research', 'k-1');

    expect(retry.statusCode).toBe(201);
    expect(await childIds(h2, root2.id)).toHaveLength(1);
  });
});
