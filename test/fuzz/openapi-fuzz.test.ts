/**
 * OpenAPI-driven fuzzing: every operation of the app's own OpenAPI document (`app.swagger()`)
 * gets hostile requests generated from its description (test/fuzz/hostile-requests.ts and
 * hostile-values.ts): wrong types, missing and unknown fields, `__proto__` keys, huge (~200 KB)
 * and unicode-edge strings, nesting 60-400 deep, malformed JSON, wrong or missing content types,
 * a body just over the limit (256 KiB here), bad path ids and query strings, garbage operator
 * keys and agent tokens, and real ids and tokens so that domain logic runs too.
 *
 * For every answer (test/fuzz/contract.ts): no 5xx; a status the operation documents; a body
 * that matches the documented schema of that status, so an error is exactly `{statusCode, code,
 * error, message}` (+ `toolResult` on the tool-call route) with a code the document lists there;
 * and no credential echoed in an error. For every rejected request (>= 400), and every GET, no
 * state change: the operator's agent list, each agent's view and whole session, the live
 * registry (incarnation, turn phase, inbox and pending lengths) and the package configuration
 * are the same before and after, on the tool-call route too.
 *
 * One small forest per operation, reused for all its requests: a root with a claimed step and a
 * continuable child whose step awaits a backend tool result. A request that succeeds may change
 * it; when it is out of shape, it is rebuilt under new ids.
 *
 * Deterministic under `npm test` (fixed seed). FUZZ_RUNS is the total number of generated
 * requests, shared by the operations (default 3000, about 15 s; 20000 on a random seed under
 * `npm run test:chaos`, see fixtures/chaos.ts); to run longer by hand:
 *
 *   FUZZ_RUNS=50000 npx vitest run test/fuzz
 *
 * AGENTFOREST_CHAOS_SEED replaces the seed.
 */
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import type { LiveAgent } from '../../src/agents/live-agent.js';
import { chaosRuns, chaosSeed } from '../fixtures/chaos.js';
import { settle, startHarness, type Harness } from '../fixtures/harness.js';
import { brokenPromises, operationsOf, routeOf, type Answer, type OpenApiDocument } from './contract.js';
import { describeRequest, requestsFor, toInject } from './hostile-requests.js';
import type { RefName, Vocabulary } from './hostile-values.js';

function positiveInteger(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${process.env[name]}"`);
  return value;
}

const SEED = chaosSeed('openapi fuzz', 20261130);
const TOTAL_RUNS = positiveInteger('FUZZ_RUNS', chaosRuns(3000, 20000));
const OPERATOR_KEY = 'fuzz-operator-key-7f3a';
const BODY_LIMIT = 256 * 1024;
const CALL_ID = 'fz-call';
const OPERATOR = { authorization: `Bearer ${OPERATOR_KEY}` };

const probe = await startHarness({ apiKeys: [OPERATOR_KEY], bodyLimit: BODY_LIMIT });
const operations = operationsOf(probe.app.swagger() as unknown as OpenApiDocument);
await probe.close();
const RUNS_PER_OPERATION = Math.max(1, Math.ceil(TOTAL_RUNS / operations.length));

let requestsSent = 0;

afterAll(() => {
  console.log(`openapi fuzz: ${requestsSent} hostile requests over ${operations.length} operations (seed ${SEED}, FUZZ_RUNS=${TOTAL_RUNS})`);
});

interface Fixture {
  root: { id: string; token: string; stepId: string; messageId: string };
  child: { id: string; token: string; stepId: string; messageId: string };
  retired: string;
}

/** Named parts of the observable state, each as JSON text: `list`, `view <id>`, `session <id>`, `registry`, `packages`. */
type Snapshot = Map<string, string>;

/** The fixture forest of one operation's run, its snapshots and its repair. */
class Forest {
  fixture!: Fixture;
  private generation = 0;
  private last: Snapshot | undefined;
  private packages = '';
  private readonly incarnations = new WeakMap<LiveAgent, number>();
  private incarnationCount = 0;

  private constructor(readonly h: Harness) {}

  static async open(): Promise<Forest> {
    const forest = new Forest(await startHarness({ apiKeys: [OPERATOR_KEY], bodyLimit: BODY_LIMIT }));
    forest.packages = (await forest.call('GET', '/v1/packages')).body;
    await forest.build();
    return forest;
  }

  async close(): Promise<void> {
    await this.h.close();
  }

  readonly resolve = (name: RefName): string => {
    const { root, child, retired } = this.fixture;
    const values: Record<RefName, string> = {
      'operator.key': OPERATOR_KEY,
      'root.id': root.id,
      'root.token': root.token,
      'root.stepId': root.stepId,
      'root.messageId': root.messageId,
      'child.id': child.id,
      'child.token': child.token,
      'child.stepId': child.stepId,
      'child.callId': CALL_ID,
      'child.messageId': child.messageId,
      'retired.id': retired,
    };
    return values[name];
  };

  /** The operator key and every live token: none may appear in an error. */
  secrets(): string[] {
    return [OPERATOR_KEY, ...[...this.h.system.registry.values()].map((agent) => agent.token)];
  }

  async vocabulary(): Promise<Vocabulary> {
    const tools = new Map<string, Vocabulary['tools'][number]>();
    for (const agent of [this.fixture.root, this.fixture.child]) {
      const res = await this.call('GET', `/v1/agents/${agent.id}/tools`, undefined, { 'x-agent-token': agent.token });
      for (const tool of (JSON.parse(res.body) as { tools: Vocabulary['tools'] }).tools) tools.set(tool.name, tool);
    }
    const packages = (JSON.parse(this.packages) as { packages: { name: string }[] }).packages.map((p) => p.name);
    return { tools: [...tools.values()], constants: { 'path:name': packages } };
  }

  /** An operator call of the fixture's own (not a fuzzed request); it must succeed. */
  async call(method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
    const res = await this.h.app.inject({ method, url, headers: { ...OPERATOR, ...headers }, ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }) });
    if (res.statusCode >= 300 && !(method === 'GET' && res.statusCode === 404)) throw new Error(`fixture call ${method} ${url} failed: ${res.statusCode} ${res.body}`);
    return { status: res.statusCode, body: res.body };
  }

  /** Disposes whatever is live and builds a fresh forest under new ids. */
  async build(): Promise<void> {
    const previous = this.generation === 0 ? undefined : this.fixture.root.id;
    const { registry } = this.h.system;
    for (const agent of [...registry.values()]) {
      if (agent.header.kind === 'root' && registry.get(agent.id) === agent) await this.call('DELETE', `/v1/agents/${agent.id}?cascade=true`);
    }
    // Children a fuzzed `DELETE ?cascade=false` left live (they never settle: their turns stay open).
    for (const agent of [...registry.values()]) {
      if (registry.get(agent.id) === agent) await this.call('DELETE', `/v1/agents/${agent.id}`);
    }
    let retired = previous;
    if (retired === undefined) {
      retired = 'fz-retired';
      await this.call('POST', '/v1/agents', { id: retired });
      await this.call('DELETE', `/v1/agents/${retired}`);
    }
    for (const p of (JSON.parse(this.packages) as { packages: { name: string; config: unknown }[] }).packages) {
      await this.call('PUT', `/v1/packages/${p.name}`, { config: p.config });
    }
    const n = ++this.generation;
    const created = JSON.parse((await this.call('POST', '/v1/agents', { id: `fz-root-${n}`, instructions: 'fuzz root' })).body) as { agent: { id: string }; agentToken: string };
    const rootId = created.agent.id;
    const rootToken = created.agentToken;
    const asRoot = { 'x-agent-token': rootToken };
    const followup = JSON.parse((await this.call('POST', `/v1/agents/${rootId}/messages`, { content: 'fuzz task', delivery: 'followup' })).body) as { messageId: string };
    await settle();
    const rootStep = JSON.parse((await this.call('POST', `/v1/agents/${rootId}/steps/next`, { waitMs: 0 }, asRoot)).body) as { step: { id: string } };
    const child = JSON.parse((await this.call('POST', `/v1/agents/${rootId}/children`, { mode: 'continuable', prompt: 'fuzz child task' }, asRoot)).body) as {
      agent: { id: string };
      agentToken: string;
      messageId: string;
    };
    await settle();
    const asChild = { 'x-agent-token': child.agentToken };
    const childStep = JSON.parse((await this.call('POST', `/v1/agents/${child.agent.id}/steps/next`, { waitMs: 0 }, asChild)).body) as { step: { id: string } };
    await this.call('POST', `/v1/agents/${child.agent.id}/steps/${childStep.step.id}/output`, { toolCalls: [{ id: CALL_ID, name: 'lookup', input: {} }] }, asChild);
    this.fixture = {
      root: { id: rootId, token: rootToken, stepId: rootStep.step.id, messageId: followup.messageId },
      child: { id: child.agent.id, token: child.agentToken, stepId: childStep.step.id, messageId: child.messageId },
      retired,
    };
    await settle();
    this.last = await this.snapshot();
    if (!this.healthy(this.last)) throw new Error(`the fixture forest is not in shape after a build: ${[...this.last.values()].join('\n')}`);
  }

  /** The state before the next request: the last snapshot, which was taken after the previous one. */
  async before(): Promise<Snapshot> {
    this.last ??= await this.snapshot();
    return this.last;
  }

  /**
   * Takes the state after a request (once the service's own scheduling has run). When the
   * request bent the forest out of shape (an accepted one may), the forest is rebuilt.
   */
  async after(): Promise<Snapshot> {
    await settle();
    const now = await this.snapshot();
    this.last = now;
    if (!this.healthy(now)) await this.build();
    return now;
  }

  private healthy(snapshot: Snapshot): boolean {
    const { registry } = this.h.system;
    const root = registry.get(this.fixture.root.id);
    const child = registry.get(this.fixture.child.id);
    const rootStep = root?.state.turn.phase === 'running' ? root.state.turn.turn.step : null;
    const childStep = child?.state.turn.phase === 'running' ? child.state.turn.turn.step : null;
    const size = [...snapshot.values()].reduce((sum, part) => sum + part.length, 0);
    return (
      registry.size === 2 &&
      root?.token === this.fixture.root.token &&
      child?.token === this.fixture.child.token &&
      rootStep?.id === this.fixture.root.stepId &&
      rootStep.status === 'claimed' &&
      childStep?.id === this.fixture.child.stepId &&
      childStep.status === 'awaiting' &&
      childStep.awaiting.includes(CALL_ID) &&
      snapshot.get('packages') === this.packages &&
      size < 1_000_000
    );
  }

  private incarnation(agent: LiveAgent): number {
    let n = this.incarnations.get(agent);
    if (n === undefined) {
      n = ++this.incarnationCount;
      this.incarnations.set(agent, n);
    }
    return n;
  }

  async snapshot(): Promise<Snapshot> {
    const parts: Snapshot = new Map();
    const listed: { id: string }[] = [];
    let cursor: string | null = null;
    do {
      const page = JSON.parse((await this.call('GET', `/v1/agents?limit=1000${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`)).body) as {
        items: { id: string }[];
        nextCursor: string | null;
      };
      listed.push(...page.items);
      cursor = page.nextCursor;
    } while (cursor !== null);
    parts.set('list', JSON.stringify(listed));
    const live = [...this.h.system.registry.values()];
    const { root, child, retired } = this.fixture;
    const ids = [...new Set([root.id, child.id, retired, ...listed.map((a) => a.id), ...live.map((a) => a.id)])].sort();
    for (const id of ids) {
      const view = await this.call('GET', `/v1/agents/${id}`);
      parts.set(`view ${id}`, `${view.status} ${view.body}`);
      parts.set(`session ${id}`, await this.session(id));
    }
    const registry = live
      .map((a) => ({ id: a.id, incarnation: this.incarnation(a), phase: a.state.turn.phase, inbox: a.state.inbox.length, pending: a.state.pending.length }))
      .sort((a, b) => (a.id < b.id ? -1 : 1));
    parts.set('registry', JSON.stringify(registry));
    parts.set('packages', (await this.call('GET', '/v1/packages')).body);
    return parts;
  }

  private async session(id: string): Promise<string> {
    const entries: unknown[] = [];
    let header: unknown;
    let after = 0;
    for (;;) {
      const res = await this.call('GET', `/v1/agents/${id}/session?after=${after}&limit=1000`);
      if (res.status !== 200) return `${res.status} ${res.body}`;
      const page = JSON.parse(res.body) as { header: unknown; entries: unknown[]; nextAfter: number | null };
      header = page.header;
      entries.push(...page.entries);
      if (page.nextAfter === null) return JSON.stringify({ header, entries });
      after = page.nextAfter;
    }
  }

  /** Sends one fuzzed request; an event stream that opens is closed at once (its body never ends). */
  async send(request: ReturnType<typeof toInject>, streams: boolean): Promise<Answer> {
    requestsSent++;
    if (!streams) {
      const res = await this.h.app.inject(request);
      return { status: res.statusCode, contentType: res.headers['content-type'] as string | undefined, body: res.body };
    }
    const res = await this.h.app.inject({ ...request, payloadAsStream: true });
    const contentType = res.headers['content-type'] as string | undefined;
    if (res.statusCode === 200 && contentType?.startsWith('text/event-stream') === true) {
      res.raw.res.destroy();
      return { status: res.statusCode, contentType, body: undefined };
    }
    const chunks: Buffer[] = [];
    for await (const chunk of res.stream()) chunks.push(chunk as Buffer);
    return { status: res.statusCode, contentType, body: Buffer.concat(chunks).toString('utf8') };
  }
}

/** The parts that differ, each with a short before/after. */
function changes(before: Snapshot, after: Snapshot): string[] {
  const cut = (s: string | undefined): string => (s === undefined ? '(absent)' : s.length > 600 ? `${s.slice(0, 600)}…(${s.length} chars)` : s);
  const names = [...new Set([...before.keys(), ...after.keys()])];
  return names.filter((name) => before.get(name) !== after.get(name)).map((name) => `${name} changed:\n      before ${cut(before.get(name))}\n      after  ${cut(after.get(name))}`);
}

describe('every operation of the OpenAPI document under hostile requests', () => {
  for (const op of operations) {
    it(
      `${op.key}: no 5xx, every error in its documented shape and code, and a rejected request changes nothing`,
      async () => {
        const forest = await Forest.open();
        try {
          const vocabulary = await forest.vocabulary();
          await fc.assert(
            fc.asyncProperty(requestsFor(op, vocabulary), async (fuzzCase) => {
              const before = await forest.before();
              const request = toInject(fuzzCase, forest.resolve, BODY_LIMIT);
              const secrets = forest.secrets();
              const answer = await forest.send(request, op.streams);
              const reached = routeOf(operations, request.method, request.url);
              const after = await forest.after();
              const broken = brokenPromises(reached, answer, secrets);
              if (answer.status >= 400 || reached?.method === 'GET') broken.push(...changes(before, after));
              if (broken.length > 0) {
                const body = answer.body === undefined ? '(event stream)' : answer.body.slice(0, 400);
                throw new Error(`${describeRequest(request)}\n  reached ${reached?.key ?? '(no documented route)'}\n  answered ${answer.status} ${body}\n  - ${broken.join('\n  - ')}`);
              }
            }),
            { seed: SEED, numRuns: RUNS_PER_OPERATION },
          );
          if (op.streams) expect(forest.h.system.hub.streams).toBe(0);
        } finally {
          await forest.close();
        }
      },
      Math.max(60_000, RUNS_PER_OPERATION * 200),
    );
  }
});
