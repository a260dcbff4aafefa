/**
 * The closed set of error codes the service can produce, and the one error type that carries
 * them. Domain and services throw `ServiceError`; only the HTTP adapter maps a code to a status
 * (routes/error-status.ts), so the compiler rejects a code that has no status.
 *
 * Adding a code: append it to ERROR_CODES, describe it in ERROR_CODE_DESCRIPTIONS (the
 * compiler insists), give it a status in routes/error-status.ts, then `npm run docs` to
 * regenerate docs/reference/errors.md.
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
  'WEBHOOK_NOT_FOUND',
  'TOOL_SERVER_NOT_FOUND',
  'BACKEND_TOOL_NOT_FOUND',
  'APPROVAL_NOT_FOUND',
  'APPROVAL_RULE_NOT_FOUND',
  'DELIVERY_NOT_FOUND',
  'TENANT_NOT_FOUND',
  'TENANT_KEY_NOT_FOUND',
  'ROUTE_NOT_FOUND',
  'AGENT_EXISTS',
  'TENANT_EXISTS',
  'TENANT_NOT_EMPTY',
  'MISDIRECTED',
  'FOREST_FAILING_OVER',
  'FOREST_FENCED',
  'PARENT_UNAVAILABLE',
  'ACTIVATION_CLOSING',
  'ACTIVATION_SETUP_REVOKED',
  'ACTIVATION_SETUP_RELEASE_FAILED',
  'NOT_RESUMABLE',
  'STEP_CONFLICT',
  'IDEMPOTENCY_CONFLICT',
  'APPROVAL_DECIDED',
  'CANCELLED',
  'LIMIT_EXCEEDED',
  'BUDGET_EXHAUSTED',
  'PAYLOAD_TOO_LARGE',
  'REQUEST_TIMEOUT',
  'HEADERS_TOO_LARGE',
  'UNSUPPORTED_MEDIA_TYPE',
  'AGENT_BUSY',
  'PARENT_BUSY',
  'RATE_LIMITED',
  'QUOTA_EXCEEDED',
  'DRAINING',
  'AT_CAPACITY',
  'OVERLOADED',
  'STORE_UNAVAILABLE',
  'INTERNAL',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/**
 * Codes that never reach a client: the layer that catches one answers with another code
 * (a fenced write's waiters get MISDIRECTED). The wire contract lists the others.
 */
export const INTERNAL_ERROR_CODES: readonly ErrorCode[] = ['FOREST_FENCED'];
export const WIRE_ERROR_CODES: readonly ErrorCode[] = ERROR_CODES.filter((code) => !INTERNAL_ERROR_CODES.includes(code));

/**
 * What each code means to a client, one sentence each; docs/reference/errors.md is generated
 * from this table and a test keeps the two equal.
 */
export const ERROR_CODE_DESCRIPTIONS: Record<ErrorCode, string> = {
  VALIDATION: 'The body, path parameters, query or headers do not match the schema, or a value is refused (the message names the field).',
  UNAUTHENTICATED: 'The operator key is missing or wrong (`Authorization: Bearer <key>`).',
  UNAUTHORIZED: 'The caller is not the exact live incarnation the operation needs: a stale or missing agent token, a report from an agent that is not a live continuable child, or a message to a child from anyone but its live parent.',
  AGENT_NOT_FOUND: 'No live agent (or, for session reads, no durable session) has this id.',
  TOOL_NOT_FOUND: 'The agent has no tool of this name in its current scope: `unknown tool "<name>"`.',
  TOOL_SERVER_NOT_FOUND: 'No MCP tool server is registered under this name.',
  BACKEND_TOOL_NOT_FOUND: 'No backend tool is declared under this name.',
  APPROVAL_NOT_FOUND: 'No approval has this id.',
  APPROVAL_RULE_NOT_FOUND: 'No approval rule has this id.',
  STEP_NOT_FOUND: 'The agent has no step with this id.',
  PACKAGE_NOT_FOUND: 'No package of this name exists.',
  MESSAGE_NOT_FOUND: 'No message with this id is known, or it was discarded with its agent.',
  WEBHOOK_NOT_FOUND: 'No webhook subscription with this id exists (it may have been deleted).',
  DELIVERY_NOT_FOUND: 'The webhook subscription has no delivery with this id (delivered ones are kept for a limited time).',
  TENANT_NOT_FOUND: 'No tenant has this id.',
  TENANT_KEY_NOT_FOUND: 'The tenant has no key with this id (it was revoked, or never made).',
  ROUTE_NOT_FOUND: 'No route matches the method and path.',
  AGENT_EXISTS: 'A live agent or a durable session already has this id.',
  TENANT_EXISTS: 'A tenant with this id exists already.',
  TENANT_NOT_EMPTY: 'The tenant has live agents: dispose of its roots before deleting it.',
  MISDIRECTED: 'Another live instance owns this forest and the request asked not to be forwarded (`Prefer: redirect`), or the forest moved while it was served; `location` and the `Location` header name where to send it.',
  FOREST_FAILING_OVER: 'The instance that owns this forest does not answer and its lease has not run out yet, so no instance may serve it; retry after `Retry-After` (by then another instance can take it over).',
  FOREST_FENCED: "Internal, never sent: the database left a forest's writes out of a commit because another instance took the forest over; the requests waiting on that forest are answered MISDIRECTED.",
  PARENT_UNAVAILABLE: 'The direct parent is not live or is being disposed: `direct parent is not live; report was not delivered`.',
  ACTIVATION_CLOSING: 'An Activation involved is being disposed: a report from a closing child, a message to one, or a new child under a parent being disposed. Nothing was delivered.',
  ACTIVATION_SETUP_REVOKED: 'A setup contribution was revoked while the child was being built; the child was not established.',
  ACTIVATION_SETUP_RELEASE_FAILED: 'A setup contribution failed to release some of its installations (for example while a package is uninstalled); the message lists them.',
  NOT_RESUMABLE: 'The agent cannot take this resume: a one-shot or closed child, a child that is unavailable, or a child the operator asked to resume (its parent\'s followup resumes it); a compaction of a closed child.',
  STEP_CONFLICT: 'The step is not in a state that accepts this: output posted twice, results for unknown calls, a step of an ended or interrupted turn, a claim whose lease expired (another attempt holds the step), a step that belongs to the built-in model driver, or a compaction while a step is claimed or awaits tool results.',
  IDEMPOTENCY_CONFLICT: 'The `Idempotency-Key` was already used by this sender for a different request.',
  APPROVAL_DECIDED: 'The approval was already decided otherwise, expired or was cancelled; the same decision again answers 200.',
  CANCELLED: 'The operation was cancelled before it was admitted (the client went away).',
  LIMIT_EXCEEDED: 'The forest would exceed a configured shape limit: too many live children of one parent, or too deep.',
  BUDGET_EXHAUSTED: 'The agent\'s budget or an ancestor\'s is spent, so its step is not handed out (its view shows `status: "paused"` and `pausedBy`); raise the budget with `PUT /v1/agents/{id}/budget`.',
  PAYLOAD_TOO_LARGE: 'The request body or a report\'s output is over its configured limit.',
  REQUEST_TIMEOUT: 'The request, or its headers, did not arrive within its deadline (`AGENTFOREST_REQUEST_TIMEOUT_MS`, `AGENTFOREST_HEADERS_TIMEOUT_MS`); the connection is closed.',
  HEADERS_TOO_LARGE: "The request's headers are larger than the server accepts; the connection is closed.",
  UNSUPPORTED_MEDIA_TYPE: 'The request body is not `application/json`, or it comes with a `Content-Encoding` other than `identity`: bodies are read as uncompressed JSON only.',
  AGENT_BUSY: 'The agent holds its maximum of accepted messages not yet logged, or of concurrent waiters; retry after `Retry-After`.',
  PARENT_BUSY: 'The direct parent holds its maximum of accepted messages not yet logged; the report was not delivered, retry later.',
  RATE_LIMITED: 'This operator key or client address made too many operator-only requests in the window; retry after `Retry-After`.',
  QUOTA_EXCEEDED: "A quota of the caller's tenant stops this: the message names the quota. For a step, `Retry-After` says when its window allows one.",
  DRAINING: 'The service is draining for shutdown and admits no new work: `continuable subagents are draining; the operation was not admitted` for an operation on a continuable child, `the service is draining for shutdown; the operation was not admitted` for any other.',
  AT_CAPACITY: 'The process already holds its maximum of live agents; retry after `Retry-After`.',
  OVERLOADED: 'The event loop is lagging beyond its configured limit, so the request was shed; retry after `Retry-After`.',
  STORE_UNAVAILABLE: "The session store cannot make writes durable right now (its database is unreachable, its disk is full, an I/O error). This request's write is kept and applied, in order, once the store is back: retry after `Retry-After` with the same `Idempotency-Key`, or read, to learn the outcome. Also sent for a read the store cannot serve.",
  INTERNAL: 'An unexpected failure; the body never carries internals, the log has the details under the request id.',
};

/** Fixed, model- or client-visible message texts. */
export const MESSAGES = {
  /** Operations on continuable subagents (the reference's text). */
  draining: 'continuable subagents are draining; the operation was not admitted',
  /** Everything else: roots, steps, streams, any request once the HTTP server closes. */
  serviceDraining: 'the service is draining for shutdown; the operation was not admitted',
  unknownTool: (name: string) => `unknown tool "${name}"`,
  parentUnavailable: 'direct parent is not live; report was not delivered',
  parentBusy: 'direct parent has too many messages waiting; report was not delivered, retry later',
  storeUnavailable:
    'the session store cannot make this write durable right now; it is kept and applied once the store is back: retry with the same Idempotency-Key, or read, to learn the outcome',
  storeUnreachable: 'the session store cannot be reached right now; retry after Retry-After',
} as const;

export class ServiceError extends Error {
  override readonly name = 'ServiceError';
  readonly code: ErrorCode;
  /** MISDIRECTED: the base URL of the instance to send the request to. */
  readonly location: string | undefined;
  /** FOREST_FENCED: the forests whose writes were refused. */
  readonly roots: readonly string[] | undefined;
  /** Sent as `Retry-After` instead of the code's usual figure (QUOTA_EXCEEDED: when the window allows). */
  readonly retryAfterSeconds: number | undefined;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; location?: string; roots?: readonly string[]; retryAfterSeconds?: number }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.location = options?.location;
    this.roots = options?.roots;
    this.retryAfterSeconds = options?.retryAfterSeconds;
  }
}

export function isServiceError(value: unknown): value is ServiceError {
  return value instanceof ServiceError;
}
