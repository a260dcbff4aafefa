/**
 * Schemas shared by several resources: the error body, ids, content, the agent view. Literal
 * sets come from the domain tuples so a value is spelled once.
 */
import { Type, type TLiteral, type TSchema, type TUnion } from '@sinclair/typebox';
import {
  ACTIVATION_STATES,
  AGENT_ID_PATTERN,
  AGENT_KINDS,
  AGENT_STATUSES,
  CHILD_MODES,
  PROVIDERS,
} from '../domain/agent.js';
import { ERROR_CODES, type ErrorCode } from '../domain/errors.js';
import { DEFAULT_MAX_STEPS, MODEL_PROVIDERS } from '../domain/model.js';
import { HTTP_STATUS, reasonPhrase } from './error-status.js';

/** A TypeBox union of string literals from one of the domain's `as const` tuples. */
export function literals<const T extends readonly string[]>(values: T, options: Record<string, unknown> = {}): TUnion<TLiteral<T[number]>[]> {
  return Type.Union(values.map((v) => Type.Literal(v)) as TLiteral<T[number]>[], options);
}

export const AgentId = Type.String({ pattern: AGENT_ID_PATTERN, description: 'An agent (and session) id.' });
export const OpaqueId = Type.String({ minLength: 1, maxLength: 200 });

export const AgentIdParams = Type.Object({ id: AgentId });

/**
 * The body of a request that takes no fields: none at all, or `{}`. As on every route, any
 * property is rejected (VALIDATION) rather than ignored.
 */
export const EmptyBody = Type.Object({}, { additionalProperties: false, description: 'No fields: send no body or `{}`.' });

export const TextBlock = Type.Object({ type: Type.Literal('text'), text: Type.String() }, { additionalProperties: false });

export const Content = Type.Union(
  [Type.String({ minLength: 1 }), Type.Array(TextBlock, { minItems: 1 })],
  { description: 'A string, or text blocks; a model reads the blocks joined with a newline.' },
);

export const ToolResultBody = Type.Object(
  {
    isError: Type.Literal(true),
    content: Type.String({ description: 'The exact text a model should be shown: `Error: <message>`.' }),
  },
  { additionalProperties: false },
);

export function errorBody(codes: readonly ErrorCode[], withToolResult = false): TSchema {
  return Type.Object(
    {
      statusCode: Type.Integer(),
      code: Type.Unsafe<ErrorCode>({ type: 'string', enum: [...codes] }),
      error: Type.String({ description: 'The HTTP reason phrase.' }),
      message: Type.String(),
      ...(withToolResult ? { toolResult: Type.Optional(ToolResultBody) } : {}),
      ...(codes.includes('MISDIRECTED')
        ? { location: Type.Optional(Type.String({ description: 'MISDIRECTED: the URL to send this request to (also in the Location header).' })) }
        : {}),
    },
    { additionalProperties: false },
  );
}

/** Codes every /v1 route can answer, besides its own. */
export const COMMON_CODES: readonly ErrorCode[] = [
  'VALIDATION',
  'UNAUTHENTICATED',
  'PAYLOAD_TOO_LARGE',
  'UNSUPPORTED_MEDIA_TYPE',
  // Several instances on one PostgreSQL database: the forest is owned by another instance.
  'MISDIRECTED',
  'RATE_LIMITED',
  'OVERLOADED',
  'INTERNAL',
];

/** Error responses for a route, grouped by status, each documenting the codes it can carry. */
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
  const out: Record<number, TSchema> = {};
  for (const [status, list] of [...byStatus.entries()].sort((a, b) => a[0] - b[0])) {
    out[status] = { ...errorBody(list, options.withToolResult === true), description: `${reasonPhrase(status)}: ${list.join(', ')}` };
  }
  return out;
}

export const ModelSpec = Type.Object(
  {
    provider: literals(MODEL_PROVIDERS, { description: 'An OpenAI-compatible chat-completions API (OpenAI, DeepSeek, vLLM, llama.cpp, Ollama, ...).' }),
    baseUrl: Type.String({ minLength: 1, maxLength: 2000, description: 'The API root; requests go to `<baseUrl>/chat/completions`.' }),
    model: Type.String({ minLength: 1, maxLength: 200, description: 'The model name the endpoint expects.' }),
    apiKeyEnv: Type.Optional(
      Type.String({
        pattern: '^[A-Za-z_][A-Za-z0-9_]*$',
        maxLength: 200,
        description: "The name of the service's environment variable that holds the API key (sent as a Bearer token). The key itself is never stored.",
      }),
    ),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    maxSteps: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, description: `Model requests one turn may make; default ${DEFAULT_MAX_STEPS}. Past it the turn fails.` })),
  },
  {
    additionalProperties: false,
    description: 'The service drives this agent itself against this model: no backend claims its steps.',
  },
);

export const TokenUsage = Type.Object(
  {
    promptTokens: Type.Integer({ minimum: 0 }),
    completionTokens: Type.Integer({ minimum: 0 }),
    totalTokens: Type.Integer({ minimum: 0 }),
  },
  { additionalProperties: false, description: 'Tokens the model request that produced this assistant message used.' },
);

export const AgentView = Type.Object(
  {
    id: AgentId,
    kind: literals(AGENT_KINDS),
    parentId: Type.Union([Type.String(), Type.Null()]),
    mode: Type.Union([literals(CHILD_MODES), Type.Null()]),
    provider: Type.Union([literals(PROVIDERS), Type.Null()]),
    depth: Type.Integer({ minimum: 0 }),
    label: Type.Optional(Type.String()),
    status: literals(AGENT_STATUSES, {
      description: 'roots: idle, running, disposing; children: idle or running while resident, settled, closed',
    }),
    resident: Type.Boolean(),
    activation: Type.Union([Type.Object({ state: literals(ACTIVATION_STATES) }), Type.Null()]),
    inbox: Type.Object({ queued: Type.Integer({ minimum: 0 }) }),
    staged: Type.Integer({ minimum: 0 }),
    createdAt: Type.String({ format: 'date-time' }),
    model: Type.Optional(ModelSpec),
  },
  { additionalProperties: false },
);

export const OPERATOR_SECURITY = [{ operatorKey: [] }];
export const AGENT_SECURITY = [{ operatorKey: [], agentToken: [] }];
