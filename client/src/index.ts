/**
 * The typed agentforest client: openapi-fetch over the paths that openapi-typescript generates
 * from the committed `openapi.yaml` (`npm run client:generate` writes `schema.d.ts`; a test fails
 * when it drifts). Owns the operator key (sent as `Authorization: Bearer`), the per-call agent
 * token header, the service's error shape, a few names for the contract's types, and wrappers
 * that answer the data or throw AgentforestError: a whole session (`readSession`), the
 * approvals inbox (`listApprovals`) and a person's decision (`decide`).
 * The step-loop driver is `./driver.js` (it imports this module, never the reverse).
 */
import createClient, { type Client } from 'openapi-fetch';
import type { components, paths } from './schema.js';

export type { components, paths } from './schema.js';

/** The openapi-fetch client typed by the generated paths. */
export type AgentforestClient = Client<paths>;

export interface AgentforestClientOptions {
  /** The service's origin, e.g. `http://127.0.0.1:3000` (no trailing `/v1`). */
  baseUrl: string;
  /** An admin key from AGENTFOREST_API_KEYS, or a tenant key (`afk_…`); sent on every call as `Authorization: Bearer`. */
  apiKey?: string;
  /** A fetch to use instead of the global one (tests, proxies). */
  fetch?: (input: Request) => Promise<Response>;
}

export function createAgentforestClient(options: AgentforestClientOptions): AgentforestClient {
  return createClient<paths>({
    baseUrl: options.baseUrl,
    ...(options.apiKey === undefined ? {} : { headers: { authorization: `Bearer ${options.apiKey}` } }),
    ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
  });
}

/** The header name of an agent token (the contract's `agentToken` security scheme). */
export const AGENT_TOKEN_HEADER = 'x-agent-token';

/**
 * Per-call headers that act as one live agent incarnation. The contract declares the token as a
 * security scheme, not a parameter, so it travels in openapi-fetch's `headers` option:
 * `client.POST(path, { params, body, headers: asAgent(token) })`.
 */
export function asAgent(agentToken: string): { [AGENT_TOKEN_HEADER]: string } {
  return { [AGENT_TOKEN_HEADER]: agentToken };
}

type Json<T> = T extends { content: { 'application/json': infer B } } ? B : never;
type Post<P extends keyof paths> = paths[P] extends { post: infer O } ? O : never;
type Get<P extends keyof paths> = paths[P] extends { get: infer O } ? O : never;

type Schemas = components['schemas'];

/** A claimed step: `{id, turnId, index, messages, tools}`. */
export type Step = Schemas['Step'];
/** One OpenAI chat-completions message of a step. */
export type ChatMessage = Schemas['ChatMessage'];
/** One service-owned tool of a step, in the chat-completions function shape. */
export type ChatTool = Schemas['ChatTool'];
/** The answer to posting a step's output. */
export type OutputResult = Json<Post<'/v1/agents/{id}/steps/{stepId}/output'>['responses'][200]>;
/** One page of a session log. */
export type SessionPage = Json<Get<'/v1/agents/{id}/session'>['responses'][200]>;
/** One durable session entry: a union discriminated by `type`. */
export type SessionEntry = Schemas['SessionEntry'];
/** A tool call waiting for (or given) a person's decision. */
export type Approval = Schemas['Approval'];
/** What the inbox is asked for: `state`, `rootId` (one forest), `limit` (default 100) and `cursor` (a page's `nextCursor`). */
export type ApprovalQuery = NonNullable<Get<'/v1/approvals'>['parameters']['query']>;
/** One page of the inbox: `{items, nextCursor}`, oldest first. */
export type ApprovalPage = Json<Get<'/v1/approvals'>['responses'][200]>;
/** A person's decision: `{decision: 'approve' | 'deny', reason?, remember?: 'once' | 'forest' | 'always'}`. */
export type ApprovalDecision = Json<Post<'/v1/approvals/{approvalId}/decision'>['requestBody']>;

/** The body of every error response: `{statusCode, code, error, message}`. */
export interface ErrorBody {
  statusCode: number;
  code: string;
  error: string;
  message: string;
}

function isErrorBody(value: unknown): value is ErrorBody {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return typeof v.statusCode === 'number' && typeof v.code === 'string' && typeof v.message === 'string';
}

/** A response the caller did not expect, with the service's `code` when the body carries one. */
export class AgentforestError extends Error {
  readonly status: number;
  /** The service's error code (e.g. `UNAUTHORIZED`), or `HTTP_<status>` when the body had none. */
  readonly code: string;
  readonly body: unknown;

  constructor(what: string, status: number, body: unknown) {
    const code = isErrorBody(body) ? body.code : `HTTP_${status}`;
    const detail = isErrorBody(body) ? body.message : typeof body === 'string' ? body : '';
    super(`${what} answered ${status} ${code}${detail === '' ? '' : `: ${detail}`}`);
    this.name = 'AgentforestError';
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/**
 * Every entry of a session log, paging with `after`/`nextAfter`. Works for any agent with a
 * durable session, live or not.
 */
export async function readSession(client: AgentforestClient, agentId: string, pageSize = 1000): Promise<SessionEntry[]> {
  const entries: SessionEntry[] = [];
  let after = 0;
  for (;;) {
    const { data, error, response } = await client.GET('/v1/agents/{id}/session', {
      params: { path: { id: agentId }, query: { after, limit: pageSize } },
    });
    if (data === undefined) throw new AgentforestError(`GET /v1/agents/${agentId}/session`, response.status, error);
    entries.push(...data.entries);
    if (data.nextAfter === null) return entries;
    after = data.nextAfter;
  }
}

/**
 * One page of the approvals inbox (every forest unless `rootId` names one), oldest first. Pass
 * the page's `nextCursor` as `cursor` for the next; it is null on the last.
 */
export async function listApprovals(client: AgentforestClient, query: ApprovalQuery = {}): Promise<ApprovalPage> {
  const { data, error, response } = await client.GET('/v1/approvals', { params: { query } });
  if (data === undefined) throw new AgentforestError('GET /v1/approvals', response.status, error);
  return data;
}

/**
 * Approve or deny a call that waits for a person; answers the approval as it now is. The same
 * decision again answers it as it is; another one after a decision, an expiry or a cancellation
 * rejects with `code: 'APPROVAL_DECIDED'` (409), an unknown id with `APPROVAL_NOT_FOUND` (404).
 */
export async function decide(client: AgentforestClient, approvalId: string, decision: ApprovalDecision): Promise<Approval> {
  const { data, error, response } = await client.POST('/v1/approvals/{approvalId}/decision', {
    params: { path: { approvalId } },
    body: decision,
  });
  if (data === undefined) throw new AgentforestError(`POST /v1/approvals/${approvalId}/decision`, response.status, error);
  return data;
}
