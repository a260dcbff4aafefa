/**
 * Tenant isolation, generated from openapi.yaml: every documented operation with a path
 * parameter has a row in COVERAGE, saying how to build requests that name tenant A's resources
 * (which of A's resources fills each parameter, and a valid body and, on agent routes, A's agent
 * token, so that nothing but the tenant check stands between the request and A's state). An
 * operation added to the document without a row fails here, and so does a row left for an
 * operation that is gone.
 *
 * Each request is sent with tenant B's key and must answer as the same request naming an id
 * that does not exist (404, the same body but for the id's text), and leave what A sees of its
 * forest as it was (tenant-forest.ts `seenBy`: views, whole sessions, grants, budgets, lists,
 * webhook deliveries, receipts, A's tenant record and keys). Admin-only operations answer a
 * tenant key 403 UNAUTHORIZED, A's id or an unknown one alike. A's own key reads every resource
 * the rows name, so the rows cannot pass by naming nothing.
 */
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { json, settle, startHarness, type Harness } from '../fixtures/harness.js';
import { startStreamableServer } from '../fixtures/mcp-server.js';
import { LOOKUP, seenBy, TENANT_FOREST_OPTIONS, tenantForest, tenantWithKey, webhookReceiver, withToken, type Headers, type TenantAgent, type TenantForest } from '../fixtures/tenant-forest.js';

const ADMIN_KEY = 'admin-key-for-isolation';
const ADMIN = { authorization: `Bearer ${ADMIN_KEY}` };
/** The id every "does not exist" request names in place of A's (it fits every path parameter's pattern). */
const UNKNOWN = 'nobody-0';
const FROM_B = 'from tenant b';

type Method = 'GET' | 'PUT' | 'POST' | 'DELETE' | 'PATCH';

/** One request naming A's resources: path parameters by name, a body, an agent token of A's. */
interface Named {
  params: Record<string, string>;
  body?: Record<string, unknown>;
  token?: TenantAgent;
}

/**
 * How a tenant key naming another tenant's resource is answered:
 * - `hidden`: 404 with `code`, exactly as an unknown id on the same operation;
 * - `hidden-as`: 404 with `code`, exactly as an unknown id on `operation` (a PUT of a named
 *   setting creates an unknown name, so the not-found body to match is the one its read answers);
 * - `admin`: 403 UNAUTHORIZED, as for an unknown id (a tenant key may not use the operation).
 */
type Answer = { kind: 'hidden'; code: string } | { kind: 'hidden-as'; code: string; operation: string } | { kind: 'admin' };

interface Coverage {
  /** The path parameter naming A's resource: the one an unknown id replaces. */
  param: string;
  answer: Answer;
  requests(a: TenantForest): Named[];
  /** An event stream: A's own read of it streams, so it is left out of A's reads. */
  stream?: true;
}

const hidden = (code: string): Answer => ({ kind: 'hidden', code });
const hiddenAs = (code: string, operation: string): Answer => ({ kind: 'hidden-as', code, operation });
const ADMIN_ONLY: Answer = { kind: 'admin' };

/** A row of an operation on one of A's resources (a single parameter, filled by `id(a)`). */
function one(param: string, answer: Answer, id: (a: TenantForest) => string, body?: Record<string, unknown>): Coverage {
  return { param, answer, requests: (a) => [{ params: { [param]: id(a) }, ...(body === undefined ? {} : { body }) }] };
}

/** A row of an agent route: tried on A's root and on A's child (a child is its root's tenant's). */
function onAgents(build: (agent: TenantAgent) => Omit<Named, 'params'> & { params?: Record<string, string> } = () => ({}), extra: Pick<Coverage, 'stream'> = {}): Coverage {
  return {
    param: 'id',
    answer: hidden('AGENT_NOT_FOUND'),
    requests: (a) =>
      [a.root, a.child].map((agent) => {
        const { params, ...rest } = build(agent);
        return { params: { id: agent.id, ...params }, ...rest };
      }),
    ...extra,
  };
}

/** Each step route names the agent's claimed step, with its token. */
const onSteps = (body: Record<string, unknown>) => onAgents((agent) => ({ token: agent, params: { stepId: agent.stepId }, body }));

/**
 * Every operation with a path parameter, keyed `METHOD path` as openapi.yaml spells it. Bodies
 * are valid and would change A's state if they reached it.
 */
const COVERAGE: Record<string, Coverage> = {
  'GET /v1/agents/{id}': onAgents(),
  'DELETE /v1/agents/{id}': onAgents(),
  'POST /v1/agents/{id}/interrupt': onAgents(() => ({ body: { keepInbox: false, subtree: true } })),
  'POST /v1/agents/{id}/resume': onAgents(() => ({ body: {} })),
  'POST /v1/agents/{id}/messages': onAgents(() => ({ body: { content: FROM_B, delivery: 'steer' } })),
  'GET /v1/agents/{id}/session': onAgents(),
  'GET /v1/agents/{id}/tools': onAgents((agent) => ({ token: agent })),
  'POST /v1/agents/{id}/tool-calls': onAgents((agent) => ({ token: agent, body: { name: 'spawn_subagent', input: { prompt: FROM_B } } })),
  'POST /v1/agents/{id}/children': onAgents((agent) => ({ token: agent, body: { mode: 'continuable', prompt: FROM_B } })),
  'PUT /v1/agents/{id}/budget': onAgents(() => ({ body: { tokens: 1, steps: 1 } })),
  'GET /v1/agents/{id}/budget': onAgents(),
  'GET /v1/agents/{id}/usage': onAgents(),
  'PUT /v1/agents/{id}/grants': onAgents(() => ({ body: { grants: ['*'] } })),
  'GET /v1/agents/{id}/grants': onAgents(),
  'GET /v1/agents/{id}/events': onAgents(() => ({}), { stream: true }),
  'POST /v1/agents/{id}/steps/next': onAgents((agent) => ({ token: agent, body: { waitMs: 0 } })),
  'POST /v1/agents/{id}/steps/{stepId}/output': onSteps({ content: FROM_B }),
  'POST /v1/agents/{id}/steps/{stepId}/deltas': onSteps({ text: 'a piece' }),
  'POST /v1/agents/{id}/steps/{stepId}/heartbeat': onSteps({}),
  'POST /v1/agents/{id}/steps/{stepId}/tool-results': onSteps({ results: [{ toolCallId: 'c1', content: FROM_B }] }),
  'POST /v1/agents/{id}/compactions': onAgents((agent) => ({ token: agent, body: { summary: FROM_B } })),
  'GET /v1/messages/{messageId}': { param: 'messageId', answer: hidden('MESSAGE_NOT_FOUND'), requests: (a) => a.messageIds.map((messageId) => ({ params: { messageId } })) },
  'PUT /v1/tool-servers/{name}': {
    param: 'name',
    answer: hiddenAs('TOOL_SERVER_NOT_FOUND', 'GET /v1/tool-servers/{name}'),
    requests: (a) => [{ params: { name: a.toolServer }, body: { url: a.toolServerUrl, tools: ['from-b'] } }],
  },
  'GET /v1/tool-servers/{name}': one('name', hidden('TOOL_SERVER_NOT_FOUND'), (a) => a.toolServer),
  'DELETE /v1/tool-servers/{name}': one('name', hidden('TOOL_SERVER_NOT_FOUND'), (a) => a.toolServer),
  'PUT /v1/backend-tools/{name}': one('name', hiddenAs('BACKEND_TOOL_NOT_FOUND', 'GET /v1/backend-tools/{name}'), (a) => a.backendTool, { ...LOOKUP, description: FROM_B }),
  'GET /v1/backend-tools/{name}': one('name', hidden('BACKEND_TOOL_NOT_FOUND'), (a) => a.backendTool),
  'DELETE /v1/backend-tools/{name}': one('name', hidden('BACKEND_TOOL_NOT_FOUND'), (a) => a.backendTool),
  // Approval rules have no read by id: an unknown id's not-found body is the delete's.
  'PUT /v1/approval-rules/{id}': one('id', hiddenAs('APPROVAL_RULE_NOT_FOUND', 'DELETE /v1/approval-rules/{id}'), (a) => a.approvalRule, { tool: 'spawn_subagent', decision: 'allow' }),
  'DELETE /v1/approval-rules/{id}': one('id', hidden('APPROVAL_RULE_NOT_FOUND'), (a) => a.approvalRule),
  'GET /v1/approvals/{approvalId}': one('approvalId', hidden('APPROVAL_NOT_FOUND'), (a) => a.approvalId),
  'POST /v1/approvals/{approvalId}/decision': one('approvalId', hidden('APPROVAL_NOT_FOUND'), (a) => a.approvalId, { decision: 'approve', remember: 'always' }),
  'GET /v1/webhooks/{id}': one('id', hidden('WEBHOOK_NOT_FOUND'), (a) => a.webhookId),
  'DELETE /v1/webhooks/{id}': one('id', hidden('WEBHOOK_NOT_FOUND'), (a) => a.webhookId),
  'GET /v1/webhooks/{id}/deliveries': one('id', hidden('WEBHOOK_NOT_FOUND'), (a) => a.webhookId),
  'POST /v1/webhooks/{id}/deliveries/{deliveryId}/retry': {
    param: 'id',
    answer: hidden('WEBHOOK_NOT_FOUND'),
    requests: (a) => [{ params: { id: a.webhookId, deliveryId: a.deliveryId } }],
  },
  'PUT /v1/packages/{name}': one('name', ADMIN_ONLY, () => 'subagent-report', {}),
  'DELETE /v1/packages/{name}': one('name', ADMIN_ONLY, () => 'subagent-report'),
  'GET /v1/tenants/{id}': one('id', ADMIN_ONLY, (a) => a.tenantId),
  'PATCH /v1/tenants/{id}': one('id', ADMIN_ONLY, (a) => a.tenantId, { name: FROM_B, quotas: { maxRoots: 0 } }),
  'DELETE /v1/tenants/{id}': one('id', ADMIN_ONLY, (a) => a.tenantId),
  'POST /v1/tenants/{id}/keys': one('id', ADMIN_ONLY, (a) => a.tenantId),
  'GET /v1/tenants/{id}/keys': one('id', ADMIN_ONLY, (a) => a.tenantId),
  'DELETE /v1/tenants/{id}/keys/{keyId}': { param: 'keyId', answer: ADMIN_ONLY, requests: (a) => [{ params: { id: a.tenantId, keyId: a.keyId } }] },
};

const DOCUMENT = parse(readFileSync(new URL('../../openapi.yaml', import.meta.url), 'utf8')) as { paths: Record<string, Record<string, unknown>> };
const METHODS: readonly Method[] = ['GET', 'PUT', 'POST', 'DELETE', 'PATCH'];

/** Every documented operation whose path has a parameter, `METHOD path`. */
function operationsWithPathParameters(): string[] {
  return Object.entries(DOCUMENT.paths)
    .filter(([path]) => path.includes('{'))
    .flatMap(([path, operations]) => METHODS.filter((method) => method.toLowerCase() in operations).map((method) => `${method} ${path}`));
}

function send(app: FastifyInstance, operation: string, request: Named, key: Headers) {
  const [method, path] = operation.split(' ') as [Method, string];
  const url = path.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = request.params[name];
    if (value === undefined) throw new Error(`${operation}: the row gives no {${name}}`);
    return encodeURIComponent(value);
  });
  return app.inject({
    method,
    url,
    headers: request.token === undefined ? key : withToken(key, request.token),
    ...(request.body === undefined ? {} : { payload: request.body }),
  });
}

/** The answer to the request naming an unknown id instead of A's, with A's id put back in its text. */
async function unknownAnswer(app: FastifyInstance, operation: string, row: Coverage, request: Named, key: Headers): Promise<{ status: number; body: unknown }> {
  const params = { ...request.params, [row.param]: UNKNOWN };
  const res =
    row.answer.kind === 'hidden-as' ? await send(app, row.answer.operation, { params }, key) : await send(app, operation, { ...request, params }, key);
  return { status: res.statusCode, body: JSON.parse(res.body.replaceAll(UNKNOWN, request.params[row.param]!)) as unknown };
}

describe('the isolation table', () => {
  it('has a row for every operation of openapi.yaml that takes a path parameter, and none for an operation not there', () => {
    const documented = operationsWithPathParameters();
    expect(documented.filter((op) => COVERAGE[op] === undefined), 'operations with a path parameter and no row in COVERAGE').toEqual([]);
    expect(Object.keys(COVERAGE).filter((op) => !documented.includes(op)), 'rows of COVERAGE for no documented operation').toEqual([]);
  });
});

describe("tenant B's key naming tenant A's resources", () => {
  let h: Harness;
  let closeServers: () => Promise<void>;
  let a: TenantForest;
  let b: Headers;
  /** What A saw of its forest before B's first request. */
  let initially: Record<string, unknown>;

  beforeAll(async () => {
    h = await startHarness({ apiKeys: [ADMIN_KEY], ...TENANT_FOREST_OPTIONS });
    const receiver = await webhookReceiver();
    const mcp = await startStreamableServer();
    closeServers = async () => {
      await receiver.close();
      await mcp.close();
    };
    a = await tenantForest(h.app, ADMIN, 'a', receiver.url, mcp.url);
    b = (await tenantWithKey(h.app, ADMIN, 'b')).key;
    initially = await seenBy(h.app, ADMIN, a);
  });

  afterAll(async () => {
    await h.close();
    await closeServers();
  });

  it.each(Object.keys(COVERAGE))('%s answers as for an unknown id and leaves A\'s forest as it was', async (operation) => {
    const row = COVERAGE[operation]!;
    for (const request of row.requests(a)) {
      const what = `${operation} naming ${request.params[row.param]}`;
      const before = await seenBy(h.app, ADMIN, a);
      const foreign = await send(h.app, operation, request, b);
      await settle();
      expect(await seenBy(h.app, ADMIN, a), `${what} leaves A's forest as it was`).toEqual(before);
      const expected = row.answer.kind === 'admin' ? [403, 'UNAUTHORIZED'] : [404, row.answer.code];
      expect([foreign.statusCode, json(foreign).code], `${what}: ${foreign.body}`).toEqual(expected);
      expect({ status: foreign.statusCode, body: json(foreign) }, `${what} answers as ${UNKNOWN} does`).toEqual(await unknownAnswer(h.app, operation, row, request, b));
    }
  });

  it("after every row, A's forest is as it was before B's first request", async () => {
    expect(await seenBy(h.app, ADMIN, a)).toEqual(initially);
  });

  it("A's own key reads every resource the rows name (the rows name what exists)", async () => {
    for (const [operation, row] of Object.entries(COVERAGE)) {
      if (!operation.startsWith('GET ') || row.answer.kind === 'admin' || row.stream === true) continue;
      for (const request of row.requests(a)) {
        const own = await send(h.app, operation, request, a.key);
        expect(own.statusCode, `${operation} naming ${request.params[row.param]} with A's key: ${own.body}`).toBe(200);
      }
    }
  });
});
