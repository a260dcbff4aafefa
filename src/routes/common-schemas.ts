/**
 * What the routes share beyond the wire contract (src/contract/): path parameters, the empty
 * body, security requirements, and the error responses of an operation, grouped by status.
 */
import { Type, type TSchema } from '@sinclair/typebox';
import { AgentId, ErrorBody, ToolCallErrorBody } from '../contract/index.js';
import { ERROR_CODES, type ErrorCode } from '../domain/errors.js';
import { HTTP_STATUS, reasonPhrase } from './error-status.js';

export const AgentIdParams = Type.Object({ id: AgentId });

/**
 * The body of a request that takes no fields: none at all, or `{}`. As on every route, any
 * property is rejected (VALIDATION) rather than ignored.
 */
export const EmptyBody = Type.Object({}, { additionalProperties: false, description: 'No fields: send no body or `{}`.' });

/** Codes every /v1 route can answer, besides its own. */
export const COMMON_CODES: readonly ErrorCode[] = [
  'VALIDATION',
  'UNAUTHENTICATED',
  'PAYLOAD_TOO_LARGE',
  'UNSUPPORTED_MEDIA_TYPE',
  // Answered before routing (plugins/errors.ts): a request past its deadline, headers too large.
  'REQUEST_TIMEOUT',
  'HEADERS_TOO_LARGE',
  // Several instances on one PostgreSQL database: the forest is owned by another instance
  // (421 only for `Prefer: redirect`), or its owner died and its lease still runs.
  'MISDIRECTED',
  'FOREST_FAILING_OVER',
  'RATE_LIMITED',
  'OVERLOADED',
  // The store cannot write (or read) right now; a write is kept and applied once it is back.
  'STORE_UNAVAILABLE',
  'INTERNAL',
];

/**
 * Error responses for a route, grouped by status: the shared error body (with `toolResult` on
 * tool-call routes), narrowed to the codes the route can answer with that status.
 */
export function errorResponses(codes: readonly ErrorCode[], options: { withToolResult?: boolean; bodyless?: boolean } = {}): Record<number, TSchema> {
  const all = [...new Set([...COMMON_CODES, ...codes])].filter(
    (c) => !(options.bodyless === true && (c === 'PAYLOAD_TOO_LARGE' || c === 'UNSUPPORTED_MEDIA_TYPE')),
  );
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of ERROR_CODES) {
    if (!all.includes(code)) continue;
    const status = HTTP_STATUS[code];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  const body = options.withToolResult === true ? ToolCallErrorBody : ErrorBody;
  const out: Record<number, TSchema> = {};
  for (const [status, list] of [...byStatus.entries()].sort((a, b) => a[0] - b[0])) {
    out[status] = Type.Unsafe({
      description: `${reasonPhrase(status)}: ${list.join(', ')}`,
      allOf: [{ $ref: body.$id }, { type: 'object', properties: { code: { type: 'string', enum: list } } }],
    });
  }
  return out;
}

export const OPERATOR_SECURITY = [{ operatorKey: [] }];
export const AGENT_SECURITY = [{ operatorKey: [], agentToken: [] }];
