/**
 * The typed client (client/) against the real server over HTTP: the app listening on
 * 127.0.0.1:0, called only through createAgentforestClient and runAgent with scripted model and
 * tool functions. Also: the generated schema must match what openapi-typescript makes of the
 * committed openapi.yaml.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { runAgent, StaleAgentTokenError, type ChildCredential, type ModelFn, type ModelReply } from '../../client/src/driver.js';
import {
  AgentforestError,
  asAgent,
  createAgentforestClient,
  decide,
  listApprovals,
  readSession,
  type AgentforestClient,
  type Approval,
  type ChatMessage,
  type SessionEntry,
} from '../../client/src/index.js';
import { startHarness, until, type Harness } from '../fixtures/harness.js';
import { closeStreams, SseStream } from '../fixtures/sse.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));


async function serve(apiKeys: string[] = []): Promise<{ h: Harness; baseUrl: string }> {
  const h = await startHarness({ apiKeys });
  const baseUrl = await h.app.listen({ host: '127.0.0.1', port: 0 });
  return { h, baseUrl };
}

async function createRoot(client: AgentforestClient, instructions: string): Promise<{ id: string; token: string }> {
  const { data, error, response } = await client.POST('/v1/agents', { body: { instructions } });
  if (data === undefined) throw new AgentforestError('POST /v1/agents', response.status, error);
  expect(response.status).toBe(201);
  return { id: data.agent.id, token: data.agentToken };
}

async function followup(client: AgentforestClient, id: string, content: string): Promise<string> {
  const { data, error, response } = await client.POST('/v1/agents/{id}/messages', {
    params: { path: { id } },
    body: { content, delivery: 'followup' },
  });
  if (data === undefined) throw new AgentforestError(`POST /v1/agents/${id}/messages`, response.status, error);
  expect(response.status).toBe(202);
  return data.messageId;
}

/** A model that answers from a script, one reply per step, and keeps what each step showed it. */
function scripted(replies: ModelReply[]): { model: ModelFn; seen: { messages: ChatMessage[]; tools: string[] }[] } {
  const seen: { messages: ChatMessage[]; tools: string[] }[] = [];
  const model: ModelFn = (messages, tools) => {
    const reply = replies[seen.length];
    seen.push({ messages, tools: tools.map((t) => t.function.name) });
    if (reply === undefined) throw new Error(`the script has no reply for step ${seen.length}`);
    return reply;
  };
  return { model, seen };
}

/** `type`, or `role:text` for messages (with tool call names or the result's call id), per entry. */
function shape(entries: readonly SessionEntry[]): string[] {
  return entries.map((e) => {
    if (e.type === 'turn-end') return `turn-end:${e.reason ?? ''}`;
    if (e.type !== 'message') return e.type;
    const text = (e.content ?? []).map((b) => b.text).join('\n');
    const calls = (e.toolCalls ?? []).map((c) => `${c.name}#${c.id}`).join(',');
    const result = e.toolCallId === undefined ? '' : `#${e.toolCallId}${e.isError === true ? '!' : ''}`;
    return `${e.role ?? ''}${result}:${text}${calls === '' ? '' : `[${calls}]`}`;
  });
}

describe('the typed client and its driver against the real server', () => {
  it('publishes the pieces a model writes as deltas under the claim\'s attempt, and records the reply', async () => {
    const { baseUrl } = await serve();
    const client = createAgentforestClient({ baseUrl });
    const root = await createRoot(client, 'You write.');
    const stream = await SseStream.open(`${baseUrl}/v1/agents/${root.id}/events?deltas=true`);
    await stream.waitFor(() => stream.statuses().length > 0, 'the stream is live');
    await followup(client, root.id, 'Say hello.');
    const model: ModelFn = async (_messages, _tools, { publish }) => {
      await publish({ text: 'Hel' });
      await publish([{ text: 'lo' }, { text: '.' }]);
      return { content: 'Hello.' };
    };
    await runAgent({ client, agentId: root.id, agentToken: root.token, model, waitMs: 5000, maxTurns: 1 });
    const entries = await readSession(client, root.id);
    await stream.waitFor(() => stream.lastId() === entries.at(-1)?.seq, 'every entry streamed');
    const deltas = stream.items.flatMap((item) => (item.kind === 'event' && item.event === 'delta' ? [item.data as { seq: number; text: string; attempt: number; stepId: string }] : []));
    const stepId = entries.find((e) => e.type === 'step-start')?.stepId;
    expect(deltas).toEqual([1, 2, 3].map((seq, i) => ({ agentId: root.id, stepId, attempt: 1, seq, text: ['Hel', 'lo', '.'][i] })));
    expect(shape(entries).slice(-2)).toEqual(['assistant:Hello.', 'turn-end:completed']);
    closeStreams();
  });

  it('drives a root through a backend tool call to an answer, and the session records every step', async () => {
    const { baseUrl } = await serve();
    const client = createAgentforestClient({ baseUrl });
    const root = await createRoot(client, 'You look things up.');
    const messageId = await followup(client, root.id, 'What is the capital of France?');

    const { model, seen } = scripted([
      {
        toolCalls: [
          { id: 'call-lookup', name: 'lookup', input: { key: 'capital:France' } },
          { id: 'call-broken', name: 'broken', input: {} },
        ],
      },
      { content: 'Paris.' },
    ]);
    const lookups: unknown[] = [];
    const summary = await runAgent({
      client,
      agentId: root.id,
      agentToken: root.token,
      model,
      tools: {
        lookup: async (input) => {
          lookups.push(input);
          return 'Paris';
        },
        broken: async () => {
          throw new Error('index offline');
        },
      },
      toolSchemas: [
        { type: 'function', function: { name: 'lookup', description: 'Look a key up.', parameters: { type: 'object', properties: { key: { type: 'string' } } } } },
      ],
      waitMs: 5000,
      maxTurns: 1,
    });

    expect(summary).toEqual({ turns: 1, steps: 2, stoppedBy: 'maxTurns' });
    expect(lookups).toEqual([{ key: 'capital:France' }]);
    expect(seen[0]).toEqual({
      messages: [
        { role: 'system', content: 'You look things up.' },
        { role: 'user', content: 'What is the capital of France?' },
      ],
      tools: ['spawn_subagent', 'lookup'],
    });
    // The second step shows the model its own calls and the results the driver posted.
    expect(seen[1]?.messages.slice(2)).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call-lookup', type: 'function', function: { name: 'lookup', arguments: '{"key":"capital:France"}' } },
          { id: 'call-broken', type: 'function', function: { name: 'broken', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call-lookup', content: 'Paris' },
      { role: 'tool', tool_call_id: 'call-broken', content: 'Error: index offline' },
    ]);

    const entries = await readSession(client, root.id);
    expect(shape(entries)).toEqual([
      'turn-start',
      'user:What is the capital of France?',
      'step-start',
      'assistant:[lookup#call-lookup,broken#call-broken]',
      'tool#call-lookup:Paris',
      'tool#call-broken!:Error: index offline',
      'step-start',
      'assistant:Paris.',
      'turn-end:completed',
    ]);
    expect(entries[1]).toMatchObject({ messageId, source: { kind: 'user' } });
    expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
  });

  it('claims each later step in delta form and still shows the model the whole conversation', async () => {
    const { baseUrl } = await serve();
    const claims: { since?: string; delta: boolean }[] = [];
    // Watches the claims on the wire: what each asked for, and which form the step came in.
    const watching: typeof fetch = async (input, init) => {
      const request = input instanceof Request ? input : new Request(input, init);
      const sent = request.url.endsWith('/steps/next') ? ((await request.clone().json()) as { since?: string }) : undefined;
      const response = await fetch(request);
      if (sent !== undefined && response.status === 200) {
        const { step } = (await response.clone().json()) as { step: { messagesSince?: unknown } };
        claims.push({ ...(sent.since === undefined ? {} : { since: sent.since }), delta: step.messagesSince !== undefined });
      }
      return response;
    };
    const client = createAgentforestClient({ baseUrl, fetch: watching });
    const root = await createRoot(client, 'You count.');
    for (const n of ['one', 'two', 'three']) await followup(client, root.id, n);
    const { model, seen } = scripted([{ content: '1' }, { content: '2' }, { content: '3' }]);

    await runAgent({ client, agentId: root.id, agentToken: root.token, model, waitMs: 5000, maxTurns: 3 });

    expect(claims.map((c) => c.delta)).toEqual([false, true, true]);
    expect(claims[0]?.since).toBeUndefined();
    expect(seen.at(-1)?.messages).toEqual([
      { role: 'system', content: 'You count.' },
      { role: 'user', content: 'one' },
      { role: 'assistant', content: '1' },
      { role: 'user', content: 'two' },
      { role: 'assistant', content: '2' },
      { role: 'user', content: 'three' },
    ]);
  });

  it('leaves a spawn_subagent result to the service, hands on the child credential, and stops with a stale-token error once the child settles', async () => {
    const { baseUrl } = await serve();
    const client = createAgentforestClient({ baseUrl });
    const root = await createRoot(client, 'You delegate.');
    await followup(client, root.id, 'Find the answer.');

    const parent = scripted([
      { toolCalls: [{ id: 'call-spawn', name: 'spawn_subagent', input: { prompt: 'Search for the answer.', label: 'finder' } }] },
      { content: 'Delegated.' },
    ]);
    const children: ChildCredential[] = [];
    const backendCalls: string[] = [];
    const summary = await runAgent({
      client,
      agentId: root.id,
      agentToken: root.token,
      model: parent.model,
      // A service-owned call must never reach the backend's tools.
      tools: {
        spawn_subagent: async () => {
          backendCalls.push('spawn_subagent');
          return 'wrong';
        },
      },
      onChild: (child) => children.push(child),
      waitMs: 5000,
      maxTurns: 1,
    });

    expect(summary).toEqual({ turns: 1, steps: 2, stoppedBy: 'maxTurns' });
    expect(backendCalls).toEqual([]);
    expect(children).toEqual([{ via: 'spawned', agentId: expect.any(String), agentToken: expect.any(String) }]);
    const child = children[0]!;
    expect(child.agentToken).not.toBe('');
    const spawnResult = parent.seen[1]?.messages.at(-1);
    expect(spawnResult).toMatchObject({ role: 'tool', tool_call_id: 'call-spawn' });
    expect(JSON.stringify(spawnResult)).toContain(child.agentId);

    // The child's prompt is its first turn; it reports, ends its turn and settles, so its token goes stale.
    const worker = scripted([{ toolCalls: [{ id: 'call-report', name: 'report', input: { output: 'The answer is 42.' } }] }, { content: 'Reported.' }]);
    const stopped = await runAgent({ client, agentId: child.agentId, agentToken: child.agentToken, model: worker.model, waitMs: 5000 }).then(
      () => {
        throw new Error('the child driver returned instead of failing on its stale token');
      },
      (error: unknown) => error,
    );
    expect(stopped).toBeInstanceOf(StaleAgentTokenError);
    expect(stopped).toMatchObject({ agentId: child.agentId, status: 403, code: 'UNAUTHORIZED', summary: { turns: 1, steps: 2 } });
    expect((stopped as Error).message).toContain(`agent "${child.agentId}" refused this driver's token`);
    expect(worker.seen[0]).toEqual({ messages: [{ role: 'user', content: 'Search for the answer.' }], tools: ['spawn_subagent', 'report'] });

    const childView = await client.GET('/v1/agents/{id}', { params: { path: { id: child.agentId } } });
    expect(childView.data).toMatchObject({ id: child.agentId, kind: 'child', parentId: root.id, status: 'settled', resident: false });

    const rootEntries = await readSession(client, root.id);
    expect(shape(rootEntries)).toEqual([
      'turn-start',
      'user:Find the answer.',
      'step-start',
      'assistant:[spawn_subagent#call-spawn]',
      expect.stringMatching(/^tool#call-spawn:/),
      'step-start',
      'assistant:Delegated.',
      'turn-end:completed',
      `user:Background subagent ${child.agentId} reported:\nThe answer is 42.`,
    ]);
    expect(rootEntries.at(-1)).toMatchObject({ source: { kind: 'subagent-report', senderSessionId: child.agentId } });
  });

  it('stops at once when aborted during a long-poll, and the abandoned poll is never handed a step', async () => {
    const { h, baseUrl } = await serve();
    const client = createAgentforestClient({ baseUrl });
    const root = await createRoot(client, 'You wait.');
    const { model, seen } = scripted([]);
    const controller = new AbortController();

    const running = runAgent({ client, agentId: root.id, agentToken: root.token, model, signal: controller.signal, waitMs: 60_000 });
    await until(() => h.system.dispatcher.waiting === 1, 'the driver long-polls', 5000);
    controller.abort();
    expect(await running).toEqual({ turns: 0, steps: 0, stoppedBy: 'aborted' });
    expect(seen).toEqual([]);
    await until(() => h.system.dispatcher.waiting === 0, 'the server drops the abandoned poll', 5000);

    // The next turn's first step is still there for a new driver.
    await followup(client, root.id, 'Are you there?');
    const next = scripted([{ content: 'Yes.' }]);
    expect(await runAgent({ client, agentId: root.id, agentToken: root.token, model: next.model, waitMs: 5000, maxTurns: 1 })).toEqual({
      turns: 1,
      steps: 1,
      stoppedBy: 'maxTurns',
    });
    expect(next.seen[0]?.messages.at(-1)).toEqual({ role: 'user', content: 'Are you there?' });
  });

  it('stops when aborted during a model call and names the step it leaves claimed', async () => {
    const { baseUrl } = await serve();
    const client = createAgentforestClient({ baseUrl });
    const root = await createRoot(client, 'You are slow.');
    await followup(client, root.id, 'Think hard.');
    const controller = new AbortController();
    let claimedStep = '';
    const summary = await runAgent({
      client,
      agentId: root.id,
      agentToken: root.token,
      signal: controller.signal,
      waitMs: 5000,
      model: (_messages, _tools, { step, signal }) => {
        claimedStep = step.id;
        controller.abort();
        signal?.throwIfAborted();
        return { content: 'never posted' };
      },
    });
    expect(claimedStep).not.toBe('');
    expect(summary).toEqual({ turns: 0, steps: 0, stoppedBy: 'aborted', abandonedStepId: claimedStep });
    expect(shape(await readSession(client, root.id))).toEqual(['turn-start', 'user:Think hard.', 'step-start']);
  });

  it('stops with a stale-token error when its root is disposed while it long-polls', async () => {
    const { h, baseUrl } = await serve();
    const client = createAgentforestClient({ baseUrl });
    const root = await createRoot(client, 'You will be disposed.');
    const { model } = scripted([]);
    const running = runAgent({ client, agentId: root.id, agentToken: root.token, model, waitMs: 60_000 }).then(
      () => null,
      (error: unknown) => error,
    );
    await until(() => h.system.dispatcher.waiting === 1, 'the driver long-polls', 5000);
    const disposed = await client.DELETE('/v1/agents/{id}', { params: { path: { id: root.id }, query: { cascade: true } } });
    expect(disposed.response.status).toBe(202);
    expect(disposed.data?.agent).toMatchObject({ id: root.id, kind: 'root' });
    const stopped = await running;
    expect(stopped).toBeInstanceOf(StaleAgentTokenError);
    expect(stopped).toMatchObject({ agentId: root.id, code: 'UNAUTHORIZED', summary: { turns: 0, steps: 0 } });
  });

  it('posts the usage a model reply carries, and stops with BUDGET_EXHAUSTED once the forest budget is spent', async () => {
    const { baseUrl } = await serve();
    const client = createAgentforestClient({ baseUrl });
    const created = await client.POST('/v1/agents', { body: { instructions: 'Be brief.', budget: { tokens: 30 } } });
    const root = { id: created.data!.agent.id, token: created.data!.agentToken };
    await followup(client, root.id, 'One.');
    const usage = { promptTokens: 20, completionTokens: 10, totalTokens: 30 };
    const { model } = scripted([{ content: 'Done.', usage, model: 'small' }]);
    expect(await runAgent({ client, agentId: root.id, agentToken: root.token, model, waitMs: 5000, maxTurns: 1 })).toEqual({ turns: 1, steps: 1, stoppedBy: 'maxTurns' });
    const answer = (await readSession(client, root.id)).find((e) => e.type === 'message' && e.role === 'assistant');
    expect(answer).toMatchObject({ usage });
    await followup(client, root.id, 'Two.');
    const stopped = await runAgent({ client, agentId: root.id, agentToken: root.token, model, waitMs: 5000 }).then(
      () => null,
      (error: unknown) => error,
    );
    expect(stopped).toBeInstanceOf(AgentforestError);
    expect(stopped).toMatchObject({ status: 409, code: 'BUDGET_EXHAUSTED' });
    const view = await client.GET('/v1/agents/{id}', { params: { path: { id: root.id } } });
    expect(view.data).toMatchObject({ status: 'paused', pausedBy: { agentId: root.id, budget: 'tokens' }, budget: { tokens: 30, remaining: { tokens: 0 } } });
  });

  it('lists the calls an approval rule asks about in the inbox, page by page, and decides them: the driver waits, then its model reads what each decision did', async () => {
    const { baseUrl } = await serve();
    const client = createAgentforestClient({ baseUrl });
    const root = await createRoot(client, 'You delegate.');
    const rule = await client.PUT('/v1/approval-rules/{id}', { params: { path: { id: 'spawns' } }, body: { tool: 'spawn_subagent', rootId: root.id, decision: 'ask' } });
    expect(rule.data).toMatchObject({ id: 'spawns', tool: 'spawn_subagent', rootId: root.id, decision: 'ask' });
    await followup(client, root.id, 'Find two answers.');

    const { model, seen } = scripted([
      {
        toolCalls: [
          { id: 'call-a', name: 'spawn_subagent', input: { prompt: 'Search A.', label: 'a' } },
          { id: 'call-b', name: 'spawn_subagent', input: { prompt: 'Search B.', label: 'b' } },
        ],
      },
      { content: 'One started.' },
    ]);
    const driving = runAgent({ client, agentId: root.id, agentToken: root.token, model, waitMs: 5000, maxTurns: 1 });

    let pending: Approval[] = [];
    await until(async () => (pending = (await listApprovals(client, { state: 'pending', rootId: root.id })).items).length === 2, 'both calls wait', 5000);
    const byCall = (id: string): Approval => pending.find((a) => a.toolCallId === id)!;
    expect(byCall('call-a')).toMatchObject({ state: 'pending', rootId: root.id, agentId: root.id, path: [root.id], tool: 'spawn_subagent', input: { prompt: 'Search A.', label: 'a' } });
    expect(byCall('call-b')).toMatchObject({ state: 'pending', tool: 'spawn_subagent', input: { prompt: 'Search B.', label: 'b' } });
    // Nothing ran while they wait: no child, and the model was asked once.
    expect((await client.GET('/v1/agents', { params: { query: { parentId: root.id } } })).data?.items).toEqual([]);
    expect(seen).toHaveLength(1);

    // One page at a time; another forest's inbox is empty.
    const first = await listApprovals(client, { rootId: root.id, limit: 1 });
    expect(first.items).toHaveLength(1);
    expect(first.nextCursor).not.toBeNull();
    const second = await listApprovals(client, { rootId: root.id, limit: 1, cursor: first.nextCursor! });
    expect(second.nextCursor).toBeNull();
    expect([...first.items, ...second.items].map((a) => a.id).sort()).toEqual(pending.map((a) => a.id).sort());
    expect(await listApprovals(client, { rootId: 'another-forest' })).toEqual({ items: [], nextCursor: null });

    const approved = await decide(client, byCall('call-a').id, { decision: 'approve' });
    expect(approved).toMatchObject({ id: byCall('call-a').id, state: 'approved', decidedAt: expect.any(String) });
    const denied = await decide(client, byCall('call-b').id, { decision: 'deny', reason: 'one is enough', remember: 'forest' });
    expect(denied).toMatchObject({ state: 'denied', reason: 'one is enough', remember: 'forest' });

    expect(await driving).toEqual({ turns: 1, steps: 2, stoppedBy: 'maxTurns' });
    const results = seen[1]?.messages.filter((m) => m.role === 'tool');
    expect(results).toHaveLength(2);
    expect(results).toContainEqual({ role: 'tool', tool_call_id: 'call-b', content: 'Error: a person denied the call to spawn_subagent: one is enough' });
    expect(JSON.stringify(results?.find((m) => m.role === 'tool' && m.tool_call_id === 'call-a'))).toMatch(/started background subagent/);
    const kids = (await client.GET('/v1/agents', { params: { query: { parentId: root.id } } })).data?.items ?? [];
    expect(kids.map((k) => k.label)).toEqual(['a']);

    // The inbox by state; `remember: forest` added a rule for the forest.
    expect((await listApprovals(client, { state: 'pending' })).items).toEqual([]);
    expect((await listApprovals(client, { state: 'approved', rootId: root.id })).items).toEqual([approved]);
    expect((await listApprovals(client, { state: 'denied', rootId: root.id })).items).toEqual([denied]);
    const rules = (await client.GET('/v1/approval-rules')).data?.items ?? [];
    expect(rules).toContainEqual(expect.objectContaining({ id: expect.stringContaining(denied.id), tool: 'spawn_subagent', rootId: root.id, decision: 'deny' }));

    // The same decision again answers the approval as it is; another is 409, an unknown id 404.
    expect(await decide(client, approved.id, { decision: 'approve' })).toEqual(approved);
    const late = await decide(client, approved.id, { decision: 'deny' }).catch((error: unknown) => error);
    expect(late).toBeInstanceOf(AgentforestError);
    expect(late).toMatchObject({ status: 409, code: 'APPROVAL_DECIDED' });
    const unknown = await decide(client, 'apr_unknown', { decision: 'approve' }).catch((error: unknown) => error);
    expect(unknown).toMatchObject({ status: 404, code: 'APPROVAL_NOT_FOUND' });
    const invalid = await listApprovals(client, { limit: 0 }).catch((error: unknown) => error);
    expect(invalid).toMatchObject({ status: 400, code: 'VALIDATION' });
  });

  it('sends the operator key as a bearer token and an agent token per call', async () => {
    const { baseUrl } = await serve(['operator-key-1']);
    const anonymous = createAgentforestClient({ baseUrl });
    const refused = await anonymous.POST('/v1/agents', { body: {} });
    expect(refused.response.status).toBe(401);
    expect(refused.error).toMatchObject({ statusCode: 401, code: 'UNAUTHENTICATED' });

    const client = createAgentforestClient({ baseUrl, apiKey: 'operator-key-1' });
    const root = await createRoot(client, 'You are keyed.');
    const withToken = await client.GET('/v1/agents/{id}/tools', { params: { path: { id: root.id } }, headers: asAgent(root.token) });
    expect(withToken.response.status).toBe(200);
    const withoutToken = await client.GET('/v1/agents/{id}/tools', { params: { path: { id: root.id } } });
    expect(withoutToken.response.status).toBe(403);
    expect(withoutToken.error).toMatchObject({ code: 'UNAUTHORIZED' });
  });
});

describe('the generated client schema', () => {
  it('is what openapi-typescript generates from the committed openapi.yaml', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'agentforest-client-'));
    try {
      const fresh = join(dir, 'schema.d.ts');
      const cli = join(REPO, 'node_modules', 'openapi-typescript', 'bin', 'cli.js');
      await promisify(execFile)(process.execPath, [cli, 'openapi.yaml', '-o', fresh], { cwd: REPO });
      const committed = await readFile(join(REPO, 'client', 'src', 'schema.d.ts'), 'utf8');
      expect(committed, 'client/src/schema.d.ts is stale: run `npm run client:generate`').toBe(await readFile(fresh, 'utf8'));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
