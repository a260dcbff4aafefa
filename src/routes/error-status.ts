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
  ROUTE_NOT_FOUND: 404,
  AGENT_EXISTS: 409,
  PARENT_UNAVAILABLE: 409,
  ACTIVATION_CLOSING: 409,
  ACTIVATION_SETUP_REVOKED: 409,
  ACTIVATION_SETUP_RELEASE_FAILED: 500,
  NOT_RESUMABLE: 409,
  STEP_CONFLICT: 409,
  IDEMPOTENCY_CONFLICT: 409,
  CANCELLED: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  DRAINING: 503,
  INTERNAL: 500,
};

export function reasonPhrase(status: number): string {
  return STATUS_CODES[status] ?? 'Error';
}
