/**
 * The only place HTTP statuses live: every ErrorCode maps to exactly one status, and the
 * compiler rejects a code without one.
 */
import { STATUS_CODES } from 'node:http';
import type { ErrorCode } from '../domain/errors.js';

export const HTTP_STATUS: Record<ErrorCode, number> = {
  VALIDATION: 400,
  UNAUTHENTICATED: 401,
  UNAUTHORIZED: 403,
  AGENT_NOT_FOUND: 404,
  TOOL_NOT_FOUND: 404,
  STEP_NOT_FOUND: 404,
  PACKAGE_NOT_FOUND: 404,
  MESSAGE_NOT_FOUND: 404,
  WEBHOOK_NOT_FOUND: 404,
  TOOL_SERVER_NOT_FOUND: 404,
  BACKEND_TOOL_NOT_FOUND: 404,
  APPROVAL_NOT_FOUND: 404,
  APPROVAL_RULE_NOT_FOUND: 404,
  DELIVERY_NOT_FOUND: 404,
  TENANT_NOT_FOUND: 404,
  TENANT_KEY_NOT_FOUND: 404,
  ROUTE_NOT_FOUND: 404,
  AGENT_EXISTS: 409,
  TENANT_EXISTS: 409,
  TENANT_NOT_EMPTY: 409,
  MISDIRECTED: 421,
  FOREST_FAILING_OVER: 503,
  // Never sent as such: the session log answers the waiters of a fenced forest with MISDIRECTED.
  FOREST_FENCED: 421,
  PARENT_UNAVAILABLE: 409,
  ACTIVATION_CLOSING: 409,
  ACTIVATION_SETUP_REVOKED: 409,
  ACTIVATION_SETUP_RELEASE_FAILED: 500,
  NOT_RESUMABLE: 409,
  STEP_CONFLICT: 409,
  IDEMPOTENCY_CONFLICT: 409,
  APPROVAL_DECIDED: 409,
  CANCELLED: 409,
  LIMIT_EXCEEDED: 409,
  BUDGET_EXHAUSTED: 409,
  PAYLOAD_TOO_LARGE: 413,
  REQUEST_TIMEOUT: 408,
  HEADERS_TOO_LARGE: 431,
  UNSUPPORTED_MEDIA_TYPE: 415,
  AGENT_BUSY: 429,
  PARENT_BUSY: 429,
  RATE_LIMITED: 429,
  QUOTA_EXCEEDED: 429,
  DRAINING: 503,
  AT_CAPACITY: 503,
  OVERLOADED: 503,
  STORE_UNAVAILABLE: 503,
  INTERNAL: 500,
};

/**
 * Seconds a client should wait before retrying, sent as `Retry-After` with these codes
 * (RATE_LIMITED sends the rate limiter's own figure).
 */
export const RETRY_AFTER_SECONDS: Partial<Record<ErrorCode, number>> = {
  AGENT_BUSY: 1,
  PARENT_BUSY: 1,
  // A forest moving between instances; an owner that died sends the rest of its lease instead.
  FOREST_FAILING_OVER: 1,
  DRAINING: 5,
  AT_CAPACITY: 5,
  OVERLOADED: 2,
  // The session log retries a failed write at least this often (session-log.ts).
  STORE_UNAVAILABLE: 2,
};

/** A request answered with a 4xx was refused: it must change nothing. */
export function refusesRequest(code: ErrorCode): boolean {
  return HTTP_STATUS[code] < 500;
}

export function reasonPhrase(status: number): string {
  return STATUS_CODES[status] ?? 'Error';
}
