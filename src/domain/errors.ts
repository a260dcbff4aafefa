/**
 * The closed set of error codes the service can produce, and the one error type that carries
 * them. Domain and services throw `ServiceError`; only the HTTP adapter maps a code to a status
 * (routes/error-status.ts), so the compiler rejects a code that has no status.
 */
export const ERROR_CODES = [
  'VALIDATION',
  'UNAUTHENTICATED',
  'UNAUTHORIZED',
  'AGENT_NOT_FOUND',
  'TOOL_NOT_FOUND',
  'STEP_NOT_FOUND',
  'PACKAGE_NOT_FOUND',
  'MESSAGE_NOT_FOUND',
  'ROUTE_NOT_FOUND',
  'AGENT_EXISTS',
  'MISDIRECTED',
  'FOREST_FENCED',
  'PARENT_UNAVAILABLE',
  'ACTIVATION_CLOSING',
  'ACTIVATION_SETUP_REVOKED',
  'ACTIVATION_SETUP_RELEASE_FAILED',
  'NOT_RESUMABLE',
  'STEP_CONFLICT',
  'IDEMPOTENCY_CONFLICT',
  'CANCELLED',
  'LIMIT_EXCEEDED',
  'PAYLOAD_TOO_LARGE',
  'UNSUPPORTED_MEDIA_TYPE',
  'AGENT_BUSY',
  'PARENT_BUSY',
  'RATE_LIMITED',
  'DRAINING',
  'AT_CAPACITY',
  'OVERLOADED',
  'INTERNAL',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/** Fixed, model- or client-visible message texts. */
export const MESSAGES = {
  draining: 'continuable subagents are draining; the operation was not admitted',
  unknownTool: (name: string) => `unknown tool "${name}"`,
  parentUnavailable: 'direct parent is not live; report was not delivered',
  parentBusy: 'direct parent has too many messages waiting; report was not delivered, retry later',
} as const;

export class ServiceError extends Error {
  override readonly name = 'ServiceError';
  readonly code: ErrorCode;
  /** MISDIRECTED: the base URL of the instance to send the request to. */
  readonly location: string | undefined;
  /** FOREST_FENCED: the forests whose writes were refused. */
  readonly roots: readonly string[] | undefined;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; location?: string; roots?: readonly string[] }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.location = options?.location;
    this.roots = options?.roots;
  }
}

export function isServiceError(value: unknown): value is ServiceError {
  return value instanceof ServiceError;
}
