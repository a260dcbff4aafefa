/**
 * Redaction of credentials from what is stored: a tool call's input as it may be logged, and
 * a tool call's result as an idempotency record may keep it. An agent token never enters the
 * append-only session or a stored result.
 */
import type { ToolCall } from '../domain/message.js';
import type { AgentCredential } from '../contract/index.js';

/** Anything that names child credentials (a tool call's result). */
interface WithCredentials {
  spawned?: AgentCredential[];
  resumed?: AgentCredential[];
}

/** A stored result never holds a token: each credential keeps its agent id, with an empty token. */
export function withoutTokens<T extends WithCredentials>(view: T): T {
  const strip = (list: AgentCredential[] | undefined): AgentCredential[] | undefined => list?.map((c) => ({ agentId: c.agentId, agentToken: '' }));
  const out: T = { ...view };
  const spawned = strip(view.spawned);
  const resumed = strip(view.resumed);
  if (spawned !== undefined) out.spawned = spawned;
  if (resumed !== undefined) out.resumed = resumed;
  return out;
}

/**
 * A tool call as it may be logged: any occurrence of the caller's own token inside its input
 * replaced. A backend that pastes its token into a model's tool input must not turn the
 * append-only session into a store of credentials.
 */
export function loggableCall(call: ToolCall, token: string): ToolCall {
  if (!mentions(call.input, token)) return call;
  const scrub = (value: unknown): unknown => {
    if (typeof value === 'string') return value.split(token).join('[redacted]');
    if (Array.isArray(value)) return value.map(scrub);
    if (value !== null && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [scrub(k) as string, scrub(v)]));
    }
    return value;
  };
  return { ...call, input: scrub(call.input) };
}

/**
 * True when any string in a JSON value, key or value, contains `text`. A token has no
 * character JSON escapes, so this finds exactly what a search of the value's JSON text would,
 * without writing that text for every call.
 */
function mentions(value: unknown, text: string): boolean {
  if (typeof value === 'string') return value.includes(text);
  if (value === null || typeof value !== 'object') return false;
  if (Array.isArray(value)) return value.some((item) => mentions(item, text));
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    if (key.includes(text) || mentions((value as Record<string, unknown>)[key], text)) return true;
  }
  return false;
}
