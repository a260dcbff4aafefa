/**
 * Security: secrets and hostile input.
 *
 * 1. Agent tokens and operator keys (the real ones, and every wrong one a caller sends) never
 *    reach the logs, an error body, a session or the SQLite file: a scripted scenario against
 *    a real server process at the lowest log level, with every response and the whole output kept.
 * 2. Token comparison is constant-time over the fixed token length; key comparison hashes
 *    first and compares every configured digest, as src/agents/tokens.ts claims (behaviour
 *    only; nothing is timed).
 * 3. JSON bodies cannot pollute Object.prototype: `__proto__` and `constructor.prototype` keys
 *    are rejected with the documented 4xx error shape, never a 5xx.
 * 4. Agent ids in paths and bodies follow the contract's pattern; anything else is a 400 (or the
 *    router's 404 when the id is not one path segment) and never creates a session.
 * 5. The container's runtime stage runs as a non-root user.
 */
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { InjectOptions } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { digest, matchesAny, matchesToken, mintToken } from '../../src/agents/tokens.js';
import { SqliteSessionStore } from '../../src/adapters/sqlite/sqlite-store.js';
import { startHarness, type Harness } from '../fixtures/harness.js';
import { PROJECT_ROOT, startServer, stopLeftoverServers, type RunningServer, type ServerExit } from '../fixtures/server-process.js';

/** Every timingSafeEqual call made by src/agents/tokens.ts: the byte lengths of both sides. */
const comparisons = vi.hoisted(() => [] as [number, number][]);

vi.mock('node:crypto', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:crypto')>();
  const timingSafeEqual = (a: NodeJS.ArrayBufferView, b: NodeJS.ArrayBufferView): boolean => {
    comparisons.push([a.byteLength, b.byteLength]);
    return actual.timingSafeEqual(a, b);
  };
  return { ...actual, timingSafeEqual, default: { ...actual, timingSafeEqual } };
});

const ERROR_KEYS = ['code', 'error', 'message', 'statusCode'];

/** A status and body text, from inject or from a raw HTTP request. */
interface Answer {
  statusCode: number;
  body: string;
}

/* ---------------------------------------------------------------------------------------------
 * 1. Secrets never leak: a real server process, every response and every log line kept.
 * ------------------------------------------------------------------------------------------- */

/** One request and its answer, exactly as the client saw it. */
interface Exchange {
  requestId: string;
  method: string;
  path: string;
  status: number;
  headers: string;
  text: string;
  /** The response may legitimately hand out tokens in its documented `agentToken` fields; names them. */
  issuesTokens?: string;
}

interface CallOptions {
  body?: unknown;
  /** A body sent verbatim (not JSON.stringify'd). */
  rawBody?: string;
  contentType?: string;
  token?: string;
  /** The operator key; null sends no Authorization header. */
  key?: string | null;
  headers?: Record<string, string>;
  /** What the tokens this response hands out are (e.g. 'root token'); unset for every other response. */
  issuesTokens?: string;
}

interface Reply {
  status: number;
  text: string;
  json: Record<string, unknown>;
}

/** A secret the test knows and must never find where it does not belong. */
interface Secret {
  label: string;
  value: string;
}

/** A random base64url string shaped like a real token (43 characters). */
function tokenShaped(): string {
  return randomBytes(32).toString('base64url');
}

const OPERATOR_KEYS = [`opkey-${randomBytes(24).toString('base64url')}`, `opkey-${randomBytes(24).toString('base64url')}`] as const;
const [KEY, SECOND_KEY] = OPERATOR_KEYS;
const WRONG_KEYS = {
  'wrong key': `opkey-${randomBytes(24).toString('base64url')}`,
  'key one character off': `${KEY.slice(0, -1)}${KEY.endsWith('x') ? 'y' : 'x'}`,
  'very long wrong key': `opkey-${randomBytes(3000).toString('base64url')}`,
};
const WRONG_TOKENS = {
  'wrong token': tokenShaped(),
  'short wrong token': 'wrong-token-7f3a9c',
  'very long wrong token': randomBytes(3000).toString('base64url'),
};

/**
 * The scenario's results: every exchange, the server's whole output, the sessions it served,
 * the data file's bytes, and every secret in play.
 */
interface Scenario {
  exchanges: Exchange[];
  logs: string;
  logLines: number;
  exit: ServerExit;
  sessions: Map<string, string>;
  dataBytesRunning: Buffer;
  dataBytesStopped: Buffer;
  /** Tokens the API handed out, taken from the responses' `agentToken` fields. */
  issued: Secret[];
  /** Secrets that the test itself sent or configured. */
  sent: Secret[];
  /** A phrase written into a session, to prove the data-file grep reads real data. */
  marker: string;
  eventStream: string;
}

/** Removes the documented token fields of a response that hands out tokens; returns what it took. */
function stripIssuedTokens(body: unknown): { rest: unknown; tokens: string[] } {
  const tokens: string[] = [];
  const take = (value: unknown): unknown => {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return value;
    const { agentToken, ...rest } = value as Record<string, unknown>;
    if (typeof agentToken === 'string') tokens.push(agentToken);
    return rest;
  };
  if (body === null || typeof body !== 'object') return { rest: body, tokens };
  const top = take(body) as Record<string, unknown>;
  if (top.resumed !== undefined) top.resumed = Array.isArray(top.resumed) ? top.resumed.map(take) : take(top.resumed);
  if (Array.isArray(top.spawned)) top.spawned = top.spawned.map(take);
  return { rest: top, tokens };
}

/**
 * Where a secret occurs in `haystack`: every place the whole secret is (at most 10), else a
 * 16-character head or tail of it, each with the text around it (the secret shown as <label>).
 */
function occurrences(haystack: string, secret: Secret): string[] {
  const probes = secret.value.length > 24 ? [secret.value, secret.value.slice(0, 16), secret.value.slice(-16)] : [secret.value];
  const probe = probes.find((p) => haystack.includes(p));
  if (probe === undefined) return [];
  const hits: string[] = [];
  for (let at = haystack.indexOf(probe); at !== -1 && hits.length < 10; at = haystack.indexOf(probe, at + probe.length)) {
    const context = haystack
      .slice(Math.max(0, at - 120), at + probe.length + 60)
      .replaceAll(probe, `<${secret.label}>`)
      .replace(/[^\x20-\x7e]/g, '.');
    hits.push(`${secret.label}${probe === secret.value ? '' : ' (a fragment)'} in …${context}…`);
  }
  return hits;
}

function leaksIn(where: string, haystack: string, secrets: readonly Secret[]): string[] {
  return secrets.flatMap((secret) => occurrences(haystack, secret).map((hit) => `${where}: ${hit}`));
}

function dataFileBytes(dir: string): Buffer {
  const files = readdirSync(dir).filter((f) => f.startsWith('agentforest.db'));
  return Buffer.concat(files.map((f) => readFileSync(join(dir, f))));
}

async function runScenario(dir: string): Promise<Scenario> {
  const dataPath = join(dir, 'agentforest.db');
  const server: RunningServer = await startServer({
    dataPath,
    env: {
      LOG_LEVEL: 'trace',
      AGENTFOREST_API_KEYS: OPERATOR_KEYS.join(','),
      AGENTFOREST_DRAIN_TIMEOUT_MS: '1000',
    },
  });
  const exchanges: Exchange[] = [];
  const issued: Secret[] = [];
  let counter = 0;

  async function call(method: string, path: string, options: CallOptions = {}): Promise<Reply> {
    const requestId = `sec-${++counter}`;
    const headers: Record<string, string> = { 'x-request-id': requestId, ...options.headers };
    const key = options.key === undefined ? KEY : options.key;
    if (key !== null) headers.authorization = `Bearer ${key}`;
    if (options.token !== undefined) headers['x-agent-token'] = options.token;
    let body: string | undefined;
    if (options.rawBody !== undefined) body = options.rawBody;
    else if (options.body !== undefined) body = JSON.stringify(options.body);
    if (body !== undefined) headers['content-type'] = options.contentType ?? 'application/json';
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body }),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    const exchange: Exchange = {
      requestId,
      method,
      path,
      status: res.status,
      headers: JSON.stringify([...res.headers.entries()]),
      text,
      ...(options.issuesTokens === undefined ? {} : { issuesTokens: options.issuesTokens }),
    };
    exchanges.push(exchange);
    const json = (res.headers.get('content-type') ?? '').startsWith('application/json') && text !== '' ? (JSON.parse(text) as Record<string, unknown>) : {};
    if (options.issuesTokens !== undefined && res.status < 300) {
      for (const token of stripIssuedTokens(json).tokens) {
        if (token !== '' && !issued.some((s) => s.value === token)) issued.push({ label: options.issuesTokens, value: token });
      }
    }
    return { status: res.status, text, json };
  }

  async function expectStatus(status: number, method: string, path: string, options: CallOptions = {}): Promise<Reply> {
    const reply = await call(method, path, options);
    if (reply.status !== status) {
      throw new Error(`${method} ${path}: expected ${status}, got ${reply.status} ${reply.text}; server logs:\n${server.text()}`);
    }
    return reply;
  }

  const marker = `marker-${randomBytes(8).toString('hex')}`;

  // A root, created by the operator; the second configured key works as well.
  const rootReply = await expectStatus(201, 'POST', '/v1/agents', { body: { instructions: `You coordinate. ${marker}` }, issuesTokens: 'root token' });
  const root = { id: String((rootReply.json.agent as { id: string }).id), token: String(rootReply.json.agentToken) };
  await expectStatus(200, 'GET', `/v1/agents/${root.id}`, { key: SECOND_KEY });

  // Wrong, missing and misplaced operator keys: 401, and the presented value is never logged.
  for (const wrong of Object.values(WRONG_KEYS)) {
    await expectStatus(401, 'POST', '/v1/agents', { key: wrong, body: {} });
    await expectStatus(401, 'GET', `/v1/agents/${root.id}/session`, { key: wrong });
  }
  await expectStatus(401, 'GET', '/v1/agents', { key: null, headers: { authorization: KEY } });
  await expectStatus(401, 'GET', '/v1/agents', { key: null, headers: { authorization: `Basic ${Buffer.from(`op:${WRONG_KEYS['wrong key']}`).toString('base64')}` } });
  await expectStatus(401, 'GET', '/v1/agents', { key: root.token });
  await expectStatus(401, 'GET', '/metrics', { key: WRONG_KEYS['wrong key'] });

  // A continuable child started with the parent's token, with an idempotency key, then replayed.
  const childBody = { mode: 'continuable', prompt: 'Find the answer.', label: 'finder' };
  const childReply = await expectStatus(201, 'POST', `/v1/agents/${root.id}/children`, {
    token: root.token,
    body: childBody,
    headers: { 'idempotency-key': 'child-1' },
    issuesTokens: 'child token',
  });
  const child = { id: String((childReply.json.agent as { id: string }).id), token: String(childReply.json.agentToken) };
  await expectStatus(201, 'POST', `/v1/agents/${root.id}/children`, {
    token: root.token,
    body: childBody,
    headers: { 'idempotency-key': 'child-1' },
    issuesTokens: 'child token',
  });

  // Wrong tokens everywhere an agent acts: 403, and the presented value is never logged.
  for (const wrong of [...Object.values(WRONG_TOKENS), KEY]) {
    await expectStatus(403, 'POST', `/v1/agents/${root.id}/steps/next`, { token: wrong, body: { waitMs: 0 } });
    await expectStatus(403, 'POST', `/v1/agents/${root.id}/children`, { token: wrong, body: childBody });
    await expectStatus(403, 'POST', `/v1/agents/${child.id}/tool-calls`, { token: wrong, body: { name: 'report', input: { output: 'x' } } });
    await expectStatus(403, 'POST', `/v1/agents/${child.id}/messages`, { token: wrong, body: { content: 'hi', delivery: 'inject' } });
    await expectStatus(403, 'GET', `/v1/agents/${child.id}/tools`, { token: wrong });
  }
  // A live token of the wrong agent is refused as well.
  await expectStatus(403, 'POST', `/v1/agents/${child.id}/steps/next`, { token: root.token, body: { waitMs: 0 } });

  // Tokens in a query string or a body field: never a credential, never echoed.
  await expectStatus(403, 'POST', `/v1/agents/${root.id}/steps/next?token=${root.token}`, { body: { waitMs: 0 } });
  await expectStatus(400, 'GET', `/v1/agents/${root.id}/session?agentToken=${root.token}`);
  await expectStatus(400, 'POST', `/v1/agents/${root.id}/steps/next`, { body: { waitMs: 0, token: root.token } });
  await expectStatus(400, 'POST', `/v1/agents/${root.id}/steps/next`, { body: { waitMs: 0, agentToken: root.token } });
  await expectStatus(400, 'POST', `/v1/agents/${root.id}/messages`, { body: { content: 'hi', delivery: 'inject', agentToken: root.token } });
  await expectStatus(400, 'POST', '/v1/agents', { body: { token: root.token } });

  // The child's turn: it claims its step, reports through the tool-call endpoint, ends its turn.
  await expectStatus(200, 'GET', `/v1/agents/${child.id}/tools`, { token: child.token });
  const childStep = await expectStatus(200, 'POST', `/v1/agents/${child.id}/steps/next`, { token: child.token, body: { waitMs: 5000 } });
  const childStepId = (childStep.json.step as { id: string }).id;
  await expectStatus(200, 'POST', `/v1/agents/${child.id}/tool-calls`, {
    token: child.token,
    body: { name: 'report', input: { output: `The answer is 42. ${marker}` } },
    headers: { 'idempotency-key': 'report-1' },
  });
  // A confused backend puts the caller's token into the tool input, in a field named agentToken:
  // the tool refuses the input, and the token must not be kept anywhere.
  const badReport = await call('POST', `/v1/agents/${child.id}/tool-calls`, {
    token: child.token,
    body: { name: 'report', input: { output: 'x', agentToken: child.token } },
  });
  expect(badReport.status).toBeGreaterThanOrEqual(400);
  expect(badReport.status).toBeLessThan(500);
  await expectStatus(200, 'POST', `/v1/agents/${child.id}/steps/${childStepId}/output`, { token: child.token, body: { content: 'done' } });

  // The root's turn: a followup, a claim, spawn_subagent through the step output, then an answer.
  await expectStatus(202, 'POST', `/v1/agents/${root.id}/messages`, { body: { content: `Go. ${marker}`, delivery: 'followup' } });
  const rootStep = await expectStatus(200, 'POST', `/v1/agents/${root.id}/steps/next`, { token: root.token, body: { waitMs: 5000 } });
  const rootStepId = (rootStep.json.step as { id: string }).id;
  await expectStatus(200, 'POST', `/v1/agents/${root.id}/steps/${rootStepId}/output`, {
    token: root.token,
    body: { toolCalls: [{ id: 'call-spawn-1', name: 'spawn_subagent', input: { prompt: 'Look around.' } }] },
    issuesTokens: 'token of the child spawned by step output',
  });
  const rootStep2 = await expectStatus(200, 'POST', `/v1/agents/${root.id}/steps/next`, { token: root.token, body: { waitMs: 5000 } });
  await expectStatus(200, 'POST', `/v1/agents/${root.id}/steps/${(rootStep2.json.step as { id: string }).id}/output`, {
    token: root.token,
    body: { content: 'All done.' },
  });
  await expectStatus(409, 'POST', `/v1/agents/${root.id}/steps/${(rootStep2.json.step as { id: string }).id}/output`, {
    token: root.token,
    body: { content: 'twice' },
  });
  await expectStatus(404, 'POST', `/v1/agents/${root.id}/steps/no-such-step/output`, { token: root.token, body: { content: 'x' } });

  // The root starts one more child through the tool-call endpoint, with a replayed key.
  for (let i = 0; i < 2; i++) {
    await expectStatus(200, 'POST', `/v1/agents/${root.id}/tool-calls`, {
      token: root.token,
      body: { name: 'spawn_subagent', input: { prompt: 'Count.' } },
      headers: { 'idempotency-key': 'spawn-1' },
      issuesTokens: 'token of the child spawned by tool-calls',
    });
  }

  // The first child settles once its turn is over; the parent's message cold-resumes it.
  const settledBy = Date.now() + 5000;
  while ((await expectStatus(200, 'GET', `/v1/agents/${child.id}`)).json.status !== 'settled') {
    if (Date.now() > settledBy) throw new Error(`child ${child.id} never settled; server logs:\n${server.text()}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
  const resumedReply = await expectStatus(202, 'POST', `/v1/agents/${child.id}/messages`, {
    token: root.token,
    body: { content: 'One more thing.', delivery: 'followup' },
    issuesTokens: 'resumed child token',
  });
  if (typeof (resumedReply.json.resumed as { agentToken?: unknown } | undefined)?.agentToken !== 'string') {
    throw new Error(`no resumed token: ${resumedReply.text}`);
  }
  // The stale incarnation's token is refused.
  await expectStatus(403, 'POST', `/v1/agents/${child.id}/steps/next`, { token: child.token, body: { waitMs: 0 } });

  // A worker pool claims the resumed child's step (the response names its token) and ends it.
  const pooled = await expectStatus(200, 'POST', '/v1/steps/next', { body: { waitMs: 5000, rootId: root.id }, issuesTokens: 'pool-claimed token' });
  const pooledAgent = String(pooled.json.agentId);
  await expectStatus(200, 'POST', `/v1/agents/${pooledAgent}/steps/${(pooled.json.step as { id: string }).id}/output`, {
    token: String(pooled.json.agentToken),
    body: { content: 'Finished.' },
  });

  // More errors: unknown agent and route, a duplicate id, a malformed body, a wrong media type.
  await expectStatus(404, 'GET', '/v1/agents/no-such-agent');
  await expectStatus(404, 'GET', '/v1/nothing-here');
  await expectStatus(409, 'POST', '/v1/agents', { body: { id: root.id } });
  await expectStatus(400, 'POST', `/v1/agents/${root.id}/messages`, { rawBody: `{"content": "${root.token}", ` });
  await expectStatus(400, 'POST', `/v1/agents/${root.id}/messages`, { body: { content: root.token, delivery: 'shout' } });
  await expectStatus(415, 'POST', `/v1/agents/${root.id}/messages`, { rawBody: `token=${root.token}`, contentType: 'application/x-www-form-urlencoded' });
  await expectStatus(200, 'GET', `/v1/messages/${String(resumedReply.json.messageId)}`);

  // Every agent's session, live or settled, and the agent lists.
  const live = await expectStatus(200, 'GET', '/v1/agents');
  const children = await expectStatus(200, 'GET', `/v1/agents?parentId=${root.id}`);
  const ids = new Set<string>([root.id, ...[...(live.json.items as { id: string }[]), ...(children.json.items as { id: string }[])].map((a) => a.id)]);
  const sessions = new Map<string, string>();
  let entryCount = 0;
  for (const id of ids) {
    const page = await expectStatus(200, 'GET', `/v1/agents/${id}/session?after=0&limit=1000`);
    sessions.set(id, page.text);
    entryCount += (page.json.entries as unknown[]).length;
  }
  await expectStatus(200, 'GET', '/v1/packages');
  const metrics = await expectStatus(200, 'GET', '/metrics');
  expect(metrics.text).toContain('agentforest_http_requests_total');

  // The forest's event stream, read until it has replayed every entry of every session.
  const eventStream = await readEvents(server.url, `/v1/agents/${root.id}/events?forest=true`, entryCount);

  const dataBytesRunning = dataFileBytes(dir);
  await expectStatus(202, 'DELETE', `/v1/agents/${root.id}`);
  const exit = await server.stop('SIGTERM');
  return {
    exchanges,
    logs: server.text(),
    logLines: server.logs.length,
    exit,
    sessions,
    dataBytesRunning,
    dataBytesStopped: dataFileBytes(dir),
    issued,
    sent: [
      { label: 'operator key 1', value: KEY },
      { label: 'operator key 2', value: SECOND_KEY },
      ...Object.entries(WRONG_KEYS).map(([label, value]) => ({ label, value })),
      ...Object.entries(WRONG_TOKENS).map(([label, value]) => ({ label, value })),
    ],
    marker,
    eventStream,
  };
}

/**
 * Reads an SSE stream until it carried `entries` entry events, then drops the connection.
 * Plain node:http, so the socket closes at once (an aborted fetch keeps it open for seconds,
 * which would hold up the server's shutdown).
 */
function readEvents(base: string, path: string, entries: number): Promise<string> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    let text = '';
    const req = request(
      { host: url.hostname, port: url.port, path, agent: false, timeout: 5000, headers: { authorization: `Bearer ${KEY}`, 'x-request-id': 'sec-events' } },
      (res) => {
        if (res.statusCode !== 200) reject(new Error(`event stream answered ${String(res.statusCode)}`));
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
          if ((text.match(/^event: entry$/gm) ?? []).length >= entries) {
            req.destroy();
            resolve(text);
          }
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`the event stream carried fewer than ${entries} entries; read:\n${text}`)));
    req.on('error', reject);
    req.end();
  });
}

describe('secrets stay out of logs, error bodies, sessions and the data file (real server, LOG_LEVEL=trace)', { timeout: 60_000 }, () => {
  let dir: string;
  let scenario: Scenario;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agentforest-security-'));
    scenario = await runScenario(dir);
  }, 45_000);

  afterAll(async () => {
    await stopLeftoverServers();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the scenario ran, captured one log record per request and stopped cleanly', () => {
    expect(scenario.exit).toEqual({ code: 0, signal: null });
    for (const exchange of scenario.exchanges) {
      expect(scenario.logs, `no log line for ${exchange.method} ${exchange.path}`).toContain(`"reqId":"${exchange.requestId}"`);
    }
    expect(scenario.logs).toContain('"reqId":"sec-events"');
    expect(scenario.logLines).toBeGreaterThan(scenario.exchanges.length);
    // Every kind of token-issuing response was exercised (a replay or the pool claim may repeat one).
    expect(new Set(scenario.issued.map((s) => s.label))).toEqual(
      new Set(['root token', 'child token', 'token of the child spawned by step output', 'token of the child spawned by tool-calls', 'resumed child token']),
    );
  });

  it('no token, wrong token, operator key or wrong key appears anywhere in the server output', () => {
    const secrets = [...scenario.issued, ...scenario.sent];
    expect(leaksIn('server output', scenario.logs, secrets)).toEqual([]);
  });

  it('no response carries a secret except the documented agentToken fields of responses that issue tokens', () => {
    const secrets = [...scenario.issued, ...scenario.sent];
    const leaks = scenario.exchanges.flatMap((exchange) => {
      let text = exchange.text;
      if (exchange.issuesTokens !== undefined && exchange.status < 300) text = JSON.stringify(stripIssuedTokens(JSON.parse(text)).rest);
      return leaksIn(`${exchange.method} ${exchange.path} -> ${exchange.status}`, `${exchange.headers}\n${text}`, secrets);
    });
    expect(leaks).toEqual([]);
  });

  it('every error response has the documented {statusCode, code, error, message} shape and none is a 5xx', () => {
    const errors = scenario.exchanges.filter((e) => e.status >= 400);
    expect(errors.map((e) => e.status)).toEqual(expect.arrayContaining([400, 401, 403, 404, 409, 415]));
    for (const error of errors) {
      const body = JSON.parse(error.text) as Record<string, unknown>;
      const keys = Object.keys(body).filter((k) => k !== 'toolResult').sort();
      expect(keys, `${error.method} ${error.path}`).toEqual(ERROR_KEYS);
      expect(body.statusCode).toBe(error.status);
    }
    expect(errors.filter((e) => e.status >= 500)).toEqual([]);
  });

  it('no session entry or header holds a token or an operator key', () => {
    expect(scenario.sessions.size).toBeGreaterThanOrEqual(4);
    const secrets = [...scenario.issued, ...scenario.sent];
    expect([
      ...[...scenario.sessions].flatMap(([id, text]) => leaksIn(`session ${id}`, text, secrets)),
      ...leaksIn('forest event stream', scenario.eventStream, secrets),
    ]).toEqual([]);
  });

  it('the SQLite file and its WAL hold no token and no operator key, while running and after shutdown', () => {
    // The grep reads real data: the marker written into sessions is in the bytes.
    expect(scenario.dataBytesRunning.includes(scenario.marker)).toBe(true);
    expect(scenario.dataBytesStopped.includes(scenario.marker)).toBe(true);
    const secrets = [...scenario.issued, ...scenario.sent];
    expect([
      ...leaksIn('data file and WAL (running)', scenario.dataBytesRunning.toString('latin1'), secrets),
      ...leaksIn('data file (after shutdown)', scenario.dataBytesStopped.toString('latin1'), secrets),
    ]).toEqual([]);
  });
});

/* ---------------------------------------------------------------------------------------------
 * 2. Token comparison: constant-time over the fixed token length (a wrong length is refused at
 *    once: every token has 43 characters); operator keys hashed first, every digest compared;
 *    nothing is timed.
 * ------------------------------------------------------------------------------------------- */

describe('token and key comparison', () => {
  const secret = mintToken();
  const expected = digest(secret);
  const wrongs: [string, string][] = [
    ['empty', ''],
    ['one character', 'a'],
    ['a prefix', secret.slice(0, 20)],
    ['one character short', secret.slice(0, -1)],
    ['one character longer', `${secret}A`],
    ['the secret twice', secret + secret],
    ['a NUL appended', `${secret}\u0000`],
    ['a different token', mintToken()],
    ['1 MiB', 'x'.repeat(1 << 20)],
    ['1 MiB starting with the secret', secret + 'x'.repeat(1 << 20)],
    ['non-ASCII', `${secret.slice(0, -1)}é`],
  ];

  afterEach(() => {
    comparisons.length = 0;
  });

  // Only a candidate of a token's exact length (43 ASCII characters) reaches the constant-time compare.
  const sameLength = new Set(['a different token']);

  it.each(wrongs)('matchesToken rejects a wrong token (%s), comparing all 43 bytes only when the length matches', (label, presented) => {
    comparisons.length = 0;
    expect(presented).not.toBe(secret);
    expect(matchesToken(presented, secret)).toBe(false);
    expect(comparisons).toEqual(sameLength.has(label) ? [[43, 43]] : []);
  });

  it('matchesToken accepts the exact token, and rejects an absent one without comparing', () => {
    comparisons.length = 0;
    expect(matchesToken(secret, secret)).toBe(true);
    expect(comparisons).toEqual([[43, 43]]);
    comparisons.length = 0;
    expect(matchesToken(undefined, secret)).toBe(false);
    expect(comparisons).toEqual([]);
  });

  it.each(wrongs)('matchesAny rejects a wrong key (%s) after comparing it with every configured digest', (_label, presented) => {
    const keys = [mintToken(), mintToken(), secret];
    comparisons.length = 0;
    expect(matchesAny(presented, keys.map(digest))).toBe(false);
    expect(comparisons).toEqual([[32, 32], [32, 32], [32, 32]]);
  });

  it('matchesAny accepts each configured key and still compares every digest when the first one matches', () => {
    const keys = [secret, mintToken(), mintToken()];
    const digests = keys.map(digest);
    for (const key of keys) {
      comparisons.length = 0;
      expect(matchesAny(key, digests)).toBe(true);
      expect(comparisons).toHaveLength(3);
    }
  });

  it('matchesAny rejects everything when no key is configured, and an absent key always', () => {
    expect(matchesAny(secret, [])).toBe(false);
    expect(matchesAny('', [])).toBe(false);
    expect(matchesAny(undefined, [expected])).toBe(false);
  });
});

/* ---------------------------------------------------------------------------------------------
 * 3 and 4. Hostile JSON and hostile ids, through the real app (inject) on a SQLite store.
 * ------------------------------------------------------------------------------------------- */

describe('hostile input through the app', () => {
  let dir: string;
  let harness: Harness;
  let root: { id: string; token: string };
  let child: { id: string; token: string };
  let port: number;
  /** Every agent id this block created on purpose; no other session may exist. */
  const created = new Set<string>();
  const keysBefore = Object.getOwnPropertyNames(Object.prototype).sort();

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agentforest-input-'));
    harness = await startHarness({ store: new SqliteSessionStore({ path: join(dir, 'agentforest.db') }) });
    const made = await harness.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: 'parent-1' } });
    root = { id: 'parent-1', token: (made.json() as { agentToken: string }).agentToken };
    const started = await harness.app.inject({
      method: 'POST',
      url: `/v1/agents/${root.id}/children`,
      headers: { 'x-agent-token': root.token },
      payload: { mode: 'continuable', prompt: 'Work.' },
    });
    const body = started.json() as { agent: { id: string }; agentToken: string };
    child = { id: body.agent.id, token: body.agentToken };
    created.add(root.id).add(child.id);
    port = Number(new URL(await harness.app.listen({ host: '127.0.0.1', port: 0 })).port);
  });

  afterAll(async () => {
    await harness.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Sends `path` byte for byte over real HTTP (no client-side `..` normalization, unlike fetch or inject). */
  function raw(method: string, path: string, options: { headers?: Record<string, string>; body?: unknown } = {}): Promise<Answer> {
    const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
    const headers: Record<string, string> = { ...options.headers, ...(payload === undefined ? {} : { 'content-type': 'application/json' }) };
    return new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, method, path, headers, agent: false, timeout: 5000 }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ statusCode: res.statusCode ?? 0, body: text }));
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${path} timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  function expectClientError(res: Answer, statuses: readonly number[], what: string): Record<string, unknown> {
    expect(statuses, `${what}: ${res.statusCode} ${res.body}`).toContain(res.statusCode);
    const body = JSON.parse(res.body) as Record<string, unknown>;
    expect(Object.keys(body).filter((k) => k !== 'toolResult').sort(), what).toEqual(ERROR_KEYS);
    expect(body.statusCode, what).toBe(res.statusCode);
    expect(typeof body.code === 'string' && typeof body.error === 'string' && typeof body.message === 'string', what).toBe(true);
    return body;
  }

  describe('prototype pollution through JSON bodies', () => {
    const PROTO = '"__proto__": {"polluted": true}';
    const CONSTRUCTOR = '"constructor": {"prototype": {"polluted": true}}';
    const ESCAPED = '"\\u005f_proto__": {"polluted": true}';

    const cases = (): [string, InjectOptions][] => {
      const agent = (token: string) => ({ 'content-type': 'application/json', 'x-agent-token': token });
      const operator = { 'content-type': 'application/json' };
      const out: [string, InjectOptions][] = [];
      for (const [name, evil] of [['__proto__', PROTO], ['constructor.prototype', CONSTRUCTOR], ['escaped __proto__', ESCAPED]] as const) {
        out.push(
          [`create root, top level ${name}`, { method: 'POST', url: '/v1/agents', headers: operator, payload: `{${evil}}` }],
          [`create root, metadata ${name}`, { method: 'POST', url: '/v1/agents', headers: operator, payload: `{"metadata": {${evil}}}` }],
          [`message ${name}`, { method: 'POST', url: `/v1/agents/${root.id}/messages`, headers: operator, payload: `{"content": "hi", "delivery": "inject", ${evil}}` }],
          [`children ${name}`, { method: 'POST', url: `/v1/agents/${root.id}/children`, headers: agent(root.token), payload: `{"mode": "continuable", "prompt": "p", ${evil}}` }],
          [`children toolFilter ${name}`, { method: 'POST', url: `/v1/agents/${root.id}/children`, headers: agent(root.token), payload: `{"mode": "continuable", "prompt": "p", "toolFilter": {"allow": [], ${evil}}}` }],
          [`tool-call input ${name}`, { method: 'POST', url: `/v1/agents/${child.id}/tool-calls`, headers: agent(child.token), payload: `{"name": "report", "input": {"output": "x", ${evil}}}` }],
          [`spawn_subagent input ${name}`, { method: 'POST', url: `/v1/agents/${root.id}/tool-calls`, headers: agent(root.token), payload: `{"name": "spawn_subagent", "input": {"prompt": "x", ${evil}}}` }],
          [`package config ${name}`, { method: 'PUT', url: '/v1/packages/subagent-report', headers: operator, payload: `{"config": {"reportDelivery": "quiet", ${evil}}}` }],
          [`package body ${name}`, { method: 'PUT', url: '/v1/packages/subagent-report', headers: operator, payload: `{${evil}}` }],
          [`step output tool-call input ${name}`, { method: 'POST', url: `/v1/agents/${root.id}/steps/no-step/output`, headers: agent(root.token), payload: `{"toolCalls": [{"id": "c", "name": "t", "input": {${evil}}}]}` }],
          [`claim ${name}`, { method: 'POST', url: `/v1/agents/${root.id}/steps/next`, headers: agent(root.token), payload: `{"waitMs": 0, ${evil}}` }],
        );
      }
      return out;
    };

    it('every polluting body is rejected with 400 VALIDATION in the documented error shape', async () => {
      const agentsBefore = (await harness.app.inject({ method: 'GET', url: '/v1/agents' })).json() as { items: unknown[] };
      for (const [what, request] of cases()) {
        const res = await harness.app.inject(request);
        const body = expectClientError(res, [400], what);
        expect(body.code, what).toBe('VALIDATION');
      }
      const agentsAfter = (await harness.app.inject({ method: 'GET', url: '/v1/agents' })).json() as { items: unknown[] };
      expect(agentsAfter.items).toHaveLength(agentsBefore.items.length);
      const packages = (await harness.app.inject({ method: 'GET', url: '/v1/packages' })).body;
      expect(packages).not.toContain('polluted');
    });

    it('after polluting bodies Object.prototype is unchanged and a fresh object has no polluted property', async () => {
      for (const [, request] of cases()) await harness.app.inject(request);
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      expect(Object.getOwnPropertyNames(Object.prototype).sort()).toEqual(keysBefore);
      expect(Object.prototype.hasOwnProperty.call(Object.prototype, 'polluted')).toBe(false);
      const fresh = await harness.app.inject({ method: 'POST', url: '/v1/agents', payload: {} });
      expect(fresh.statusCode).toBe(201);
      const view = (fresh.json() as { agent: Record<string, unknown> }).agent;
      created.add(String(view.id));
      expect(view.polluted).toBeUndefined();
    });
  });

  describe('agent id validation', () => {
    // The contract: ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$ (openapi.yaml, AgentId).
    const badIds: [string, string][] = [
      ['129 characters', 'a'.repeat(129)],
      ['300 characters', 'b'.repeat(300)],
      ['an encoded slash', 'a/b'],
      ['only dots', '..'],
      ['a parent traversal', '../parent-1'],
      ['a leading dot', '.hidden'],
      ['a NUL', 'a\u0000b'],
      ['a trailing NUL', 'parent-1\u0000'],
      ['a space', 'a b'],
      ['a leading space', ' parent-1'],
      ['a trailing newline', 'parent-1\n'],
      ['a tab', 'a\tb'],
      ['a carriage return and line feed', 'a\r\nb'],
      ['a bell control character', 'a\u0007b'],
      ['a C1 control (NEL)', 'a\u0085b'],
      ['a right-to-left override', 'a\u202Eb'],
      ['a zero-width space', 'a\u200Bb'],
      ['a non-ASCII letter', 'agént'],
      ['a percent sign', 'a%b'],
      ['a backslash', 'a\\b'],
    ];

    async function sessionIds(): Promise<string[]> {
      const db = new Database(join(dir, 'agentforest.db'), { readonly: true, fileMustExist: true });
      try {
        return db.prepare<[], { id: string }>('SELECT id FROM sessions ORDER BY id').all().map((r) => r.id);
      } finally {
        db.close();
      }
    }

    it.each(badIds)('an agent id with %s is a 400 VALIDATION on every route that takes one in its path', async (_label, id) => {
      // Percent-encoded as a client must; dots stay literal, so `..` reaches the server as is.
      const path = encodeURIComponent(id);
      const headers = { 'x-agent-token': root.token };
      const requests: [string, string, { headers?: Record<string, string>; body?: unknown }][] = [
        ['GET', `/v1/agents/${path}`, {}],
        ['DELETE', `/v1/agents/${path}`, {}],
        ['POST', `/v1/agents/${path}/resume`, {}],
        ['GET', `/v1/agents/${path}/session`, {}],
        ['GET', `/v1/agents/${path}/events`, {}],
        ['POST', `/v1/agents/${path}/messages`, { body: { content: 'hi', delivery: 'followup' } }],
        ['POST', `/v1/agents/${path}/children`, { headers, body: { mode: 'continuable', prompt: 'p' } }],
        ['GET', `/v1/agents/${path}/tools`, { headers }],
        ['POST', `/v1/agents/${path}/tool-calls`, { headers, body: { name: 'report', input: { output: 'x' } } }],
        ['POST', `/v1/agents/${path}/steps/next`, { headers, body: { waitMs: 0 } }],
        ['POST', `/v1/agents/${path}/steps/s1/output`, { headers, body: { content: 'x' } }],
        ['POST', `/v1/agents/${path}/steps/s1/tool-results`, { headers, body: { results: [{ toolCallId: 'c', content: 'x' }] } }],
      ];
      for (const [method, url, options] of requests) {
        const what = `${method} ${url}`;
        const body = expectClientError(await raw(method, url, options), [400], what);
        expect(body.code, what).toBe('VALIDATION');
      }
    });

    it.each(badIds)('an agent id with %s is a 400 VALIDATION in bodies and query strings', async (_label, id) => {
      const requests: [string, InjectOptions][] = [
        ['create root', { method: 'POST', url: '/v1/agents', payload: { id } }],
        ['pool claim rootId', { method: 'POST', url: '/v1/steps/next', payload: { waitMs: 0, rootId: id } }],
        ['list parentId', { method: 'GET', url: `/v1/agents?parentId=${encodeURIComponent(id)}` }],
      ];
      for (const [what, request] of requests) {
        const body = expectClientError(await harness.app.inject(request), [400], what);
        expect(body.code, what).toBe('VALIDATION');
      }
    });

    it('an empty id or a raw slash or dot-segment in the path matches no route: 404 ROUTE_NOT_FOUND or 400, never an agent', async () => {
      const message = { body: { content: 'hi', delivery: 'followup' } };
      const requests: [string, string, { body?: unknown }][] = [
        ['GET', '/v1/agents//session', {}],
        ['POST', '/v1/agents//messages', message],
        ['POST', '/v1/agents//resume', {}],
        ['GET', '/v1/agents/parent-1/../parent-1/session', {}],
        ['POST', '/v1/agents/../parent-1/messages', message],
        ['POST', '/v1/agents/a/b/messages', message],
      ];
      for (const [method, url, options] of requests) {
        const what = `${method} ${url}`;
        const body = expectClientError(await raw(method, url, options), [400, 404], what);
        expect(body.code, what).toBe(body.statusCode === 400 ? 'VALIDATION' : 'ROUTE_NOT_FOUND');
      }
      const empty = expectClientError(await harness.app.inject({ method: 'POST', url: '/v1/agents', payload: { id: '' } }), [400], 'empty id in body');
      expect(empty.code).toBe('VALIDATION');
    });

    it('a 128-character id is accepted, so the limit is exactly the contract', async () => {
      const id = `L${'x'.repeat(127)}`;
      const res = await harness.app.inject({ method: 'POST', url: '/v1/agents', payload: { id } });
      expect(res.statusCode).toBe(201);
      created.add(id);
      expect(await sessionIds()).toContain(id);
    });

    it('no rejected id ever created a session', async () => {
      for (const [, id] of badIds) {
        await harness.app.inject({ method: 'POST', url: '/v1/agents', payload: { id } });
        await harness.app.inject({ method: 'POST', url: `/v1/agents/${encodeURIComponent(id)}/resume` });
      }
      const ids = await sessionIds();
      expect(ids.length).toBeGreaterThanOrEqual(2);
      expect(ids.filter((id) => !created.has(id))).toEqual([]);
      const pattern = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
      expect(ids.filter((id) => !pattern.test(id))).toEqual([]);
    });
  });
});

/* ---------------------------------------------------------------------------------------------
 * 5. The container runs as a non-root user.
 * ------------------------------------------------------------------------------------------- */

interface DockerInstruction {
  keyword: string;
  args: string;
  line: number;
}

/** Dockerfile instructions: parser directives, comments and line continuations handled. */
function parseDockerfile(text: string): DockerInstruction[] {
  const lines = text.split(/\r?\n/);
  let escape = '\\';
  for (const line of lines) {
    const directive = /^#\s*([a-z]+)\s*=\s*(\S+)\s*$/i.exec(line);
    if (directive === null) break;
    if (directive[1]?.toLowerCase() === 'escape') escape = directive[2] ?? '\\';
  }
  const out: DockerInstruction[] = [];
  let pending = '';
  let start = 0;
  lines.forEach((raw, index) => {
    const line = raw.trim();
    if (pending === '' && (line === '' || line.startsWith('#'))) return;
    if (pending !== '' && line.startsWith('#')) return;
    if (pending === '') start = index + 1;
    if (line.endsWith(escape)) {
      pending += `${line.slice(0, -escape.length)} `;
      return;
    }
    const full = `${pending}${line}`.trim();
    pending = '';
    const match = /^(\S+)\s*(.*)$/s.exec(full);
    if (match !== null) out.push({ keyword: (match[1] ?? '').toUpperCase(), args: (match[2] ?? '').trim(), line: start });
  });
  return out;
}

describe('the container image', () => {
  const dockerfile = join(PROJECT_ROOT, 'Dockerfile');

  it('the runtime stage switches to a non-root, non-zero user before CMD and never back', () => {
    expect(existsSync(dockerfile)).toBe(true);
    const instructions = parseDockerfile(readFileSync(dockerfile, 'utf8'));
    const lastFrom = instructions.map((i) => i.keyword).lastIndexOf('FROM');
    expect(lastFrom).toBeGreaterThanOrEqual(0);
    const stage = instructions.slice(lastFrom + 1);
    const start = stage.findIndex((i) => i.keyword === 'CMD' || i.keyword === 'ENTRYPOINT');
    expect(start, 'the runtime stage has a CMD or ENTRYPOINT').toBeGreaterThanOrEqual(0);
    const users = stage.filter((i) => i.keyword === 'USER');
    expect(users.length, 'the runtime stage has a USER instruction').toBeGreaterThan(0);
    const effective = users[users.length - 1]!;
    expect(stage.indexOf(effective), `USER (line ${effective.line}) comes before CMD/ENTRYPOINT`).toBeLessThan(start);
    const [user = '', group] = effective.args.split(':');
    expect(user, 'a literal user, not a build variable').toMatch(/^[A-Za-z0-9_][A-Za-z0-9_.-]*$/);
    expect(user.toLowerCase()).not.toBe('root');
    expect(/^0+$/.test(user), `user ${user} is uid 0`).toBe(false);
    if (group !== undefined) {
      expect(group.toLowerCase()).not.toBe('root');
      expect(/^0+$/.test(group), `group ${group} is gid 0`).toBe(false);
    }
  });

  it('the image starts the server as `npm start` does, node flags included', () => {
    const instructions = parseDockerfile(readFileSync(dockerfile, 'utf8'));
    const cmd = instructions.filter((i) => i.keyword === 'CMD').at(-1);
    expect(cmd, 'the runtime stage has a CMD').toBeDefined();
    const scripts = (JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    expect(JSON.parse(cmd!.args)).toEqual(scripts.start?.split(' '));
    expect(scripts.start).toMatch(/^node (--[\w-]+=\S+ )*dist\/server\.js$/);
  });

  it('the Dockerfile parser sees the last USER of the last stage, across continuations and comments', () => {
    const sample = [
      'FROM node AS build',
      'USER node',
      '# a comment',
      'FROM node AS runtime',
      'RUN echo a \\',
      '  && echo b',
      'USER 0',
      'CMD ["node"]',
    ].join('\n');
    const instructions = parseDockerfile(sample);
    expect(instructions.map((i) => i.keyword)).toEqual(['FROM', 'USER', 'FROM', 'RUN', 'USER', 'CMD']);
    expect(instructions[3]?.args).toBe('echo a  && echo b');
    expect(instructions[4]).toEqual({ keyword: 'USER', args: '0', line: 7 });
  });
});
