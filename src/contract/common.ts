/**
 * The shapes most of the API shares: ids, message content, the model spec, token usage, the
 * agent view and the answers that carry one, agent credentials and the error body. A shape
 * with an `$id` is an OpenAPI component (see ./index.ts); one without is written inline in the
 * operations that use it.
 */
import { QUOTA_NAMES } from '../domain/tenants.js';
import { Type, type Static } from '@sinclair/typebox';
import { BUDGET_KINDS } from '../domain/budget.js';
import { ACTIVATION_STATES, AGENT_ID_PATTERN, AGENT_KINDS, AGENT_STATUSES, CHILD_MODES, PROVIDERS } from '../domain/agent.js';
import { WIRE_ERROR_CODES, type ErrorCode } from '../domain/errors.js';
import { DEFAULT_MAX_STEPS, MAX_FALLBACKS, MODEL_PROVIDERS } from '../domain/model.js';
import { exactInteger, exactNumber, literals, ref, shared } from './schema.js';

export const AgentId = Type.String({ pattern: AGENT_ID_PATTERN, description: 'An agent (and session) id.' });
export const OpaqueId = Type.String({ minLength: 1, maxLength: 200 });

export const TextBlock = shared('TextBlock', Type.Object({ type: Type.Literal('text'), text: Type.String() }, { additionalProperties: false }));
export type TextBlock = Static<typeof TextBlock>;

export const Content = shared(
  'Content',
  Type.Union([Type.String({ minLength: 1 }), Type.Array(ref(TextBlock), { minItems: 1 })], {
    description: 'A string, or text blocks; a model reads the blocks joined with a newline.',
  }),
);
export type Content = Static<typeof Content>;

const MODEL_SPEC_FIELDS = {
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
  fallbacks: Type.Optional(
    Type.Array(
      Type.Object(
        {
          baseUrl: Type.Optional(Type.String({ minLength: 1, maxLength: 2000, description: "Default: the primary's." })),
          model: Type.String({ minLength: 1, maxLength: 200 }),
          apiKeyEnv: Type.Optional(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$', maxLength: 200, description: "Default: the primary's." })),
        },
        { additionalProperties: false },
      ),
      {
        maxItems: MAX_FALLBACKS,
        description:
          'Tried in order when a request answers 429 or 5xx, times out, or cannot connect; never on another 4xx or on any answer. ' +
          "Each inherits what it leaves out from the primary. The step's output records the model that answered, and is priced by it.",
      },
    ),
  ),
  temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
  maxSteps: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, description: `Model requests one turn may make; default ${DEFAULT_MAX_STEPS}. Past it the turn fails.` })),
  maxContextTokens: Type.Optional(
    exactInteger({
      minimum: 1,
      description:
        "The most estimated tokens (a step's `estimatedTokens`: about 4 bytes of JSON each, tools included) one model request may carry. " +
        'When a step would carry more, the service first asks the same model for a summary of the older part of the conversation and writes it as a compaction entry; ' +
        'the step then starts from that summary and keeps the recent part (about half of this) as it was. Absent: the service never compacts on its own.',
    }),
  ),
};

export const ModelSpec = shared(
  'ModelSpec',
  Type.Object(MODEL_SPEC_FIELDS, {
    additionalProperties: false,
    description: 'The service drives this agent itself against this model: no backend claims its steps.',
  }),
);
export type ModelSpec = Static<typeof ModelSpec>;

export const TokenUsage = shared(
  'TokenUsage',
  Type.Object(
    {
      promptTokens: exactInteger({ minimum: 0 }),
      completionTokens: exactInteger({ minimum: 0 }),
      totalTokens: exactInteger({ minimum: 0 }),
      costMicroUsd: Type.Optional(
        exactNumber({ minimum: 0, description: 'What the request cost, in millionths of a US dollar: as posted, or priced by the service from AGENTFOREST_MODEL_PRICES.' }),
      ),
    },
    { additionalProperties: false, description: 'Tokens the model request that produced this assistant message used; `totalTokens` is what a tokens budget counts.' },
  ),
);
export type TokenUsage = Static<typeof TokenUsage>;

const BUDGET_LIMIT_FIELDS = {
  tokens: Type.Optional(exactInteger({ minimum: 0, description: 'Tokens (`totalTokens` of recorded usage) the subtree may spend.' })),
  steps: Type.Optional(exactInteger({ minimum: 0, description: 'Model requests (step claims) the subtree may make.' })),
  costMicroUsd: Type.Optional(exactInteger({ minimum: 0, description: 'Millionths of a US dollar the subtree may spend (usage priced per AGENTFOREST_MODEL_PRICES, or as posted).' })),
};

export const Budget = shared(
  'Budget',
  Type.Object(BUDGET_LIMIT_FIELDS, {
    additionalProperties: false,
    description: "Limits on what an agent's whole subtree (itself and every descendant) spends; a limit left out is not limited by this agent.",
  }),
);
export type Budget = Static<typeof Budget>;

export const Usage = shared(
  'Usage',
  Type.Object(
    {
      steps: Type.Integer({ minimum: 0 }),
      promptTokens: Type.Integer({ minimum: 0 }),
      completionTokens: Type.Integer({ minimum: 0 }),
      totalTokens: Type.Integer({ minimum: 0 }),
      costMicroUsd: Type.Number({ minimum: 0 }),
    },
    { additionalProperties: false, description: 'What was spent: steps claimed, tokens of recorded usage, cost in millionths of a US dollar.' },
  ),
);
export type Usage = Static<typeof Usage>;

export const UsageRollup = Type.Object(
  { self: ref(Usage), subtree: ref(Usage, { description: 'The agent and every descendant.' }) },
  { additionalProperties: false },
);

export const BudgetView = shared(
  'BudgetView',
  Type.Object(
    { ...BUDGET_LIMIT_FIELDS, remaining: ref(Budget, { description: 'What is left of each limit (never below 0).' }) },
    { additionalProperties: false, description: "The agent's own limits and what remains of each." },
  ),
);
export type BudgetView = Static<typeof BudgetView>;

export const PausedBy = Type.Object(
  {
    agentId: Type.String({ description: 'The agent whose budget is spent: this one or an ancestor.' }),
    budget: literals(BUDGET_KINDS, { description: 'Which of its limits.' }),
  },
  { additionalProperties: false },
);

export const AgentView = shared(
  'AgentView',
  Type.Object(
    {
      id: AgentId,
      kind: literals(AGENT_KINDS),
      parentId: Type.Union([Type.String(), Type.Null()]),
      mode: Type.Union([literals(CHILD_MODES), Type.Null()]),
      provider: Type.Union([literals(PROVIDERS), Type.Null()]),
      depth: Type.Integer({ minimum: 0 }),
      label: Type.Optional(Type.String()),
      tenantId: Type.Optional(Type.String({ description: "The tenant it belongs to (its root's); absent for a root made with an admin key." })),
      status: literals(AGENT_STATUSES, {
        description: 'roots: idle, running, disposing; children: idle or running while resident, settled, closed; either: paused while a budget stops its next step (see pausedBy)',
      }),
      resident: Type.Boolean(),
      activation: Type.Union([Type.Object({ state: literals(ACTIVATION_STATES) }), Type.Null()]),
      inbox: Type.Object({ queued: Type.Integer({ minimum: 0 }) }),
      staged: Type.Integer({ minimum: 0 }),
      createdAt: Type.String({ format: 'date-time' }),
      model: Type.Optional(ref(ModelSpec)),
      usage: UsageRollup,
      budget: Type.Union([ref(BudgetView), Type.Null()], { description: 'Its own limits and what remains; null when it has none (a budget above it may still stop it).' }),
      pausedBy: Type.Optional(
        Type.Object(PausedBy.properties, { additionalProperties: false, description: 'status paused: the budget that stops its next step.' }),
      ),
      waiting: Type.Optional(
        Type.Union(
          [
            Type.Object(
              {
                reason: Type.Literal('quota'),
                quota: literals(QUOTA_NAMES),
                until: Type.String({ format: 'date-time', description: 'When the window ends and the step is offered again (sooner if the quota is raised).' }),
              },
              { additionalProperties: false, description: "A tenant's time quota holds its next step." },
            ),
            Type.Object(
              {
                reason: Type.Literal('rate-limited'),
                until: Type.String({ format: 'date-time', description: "When the first of its model's providers opens (its back-off ends, or the minute of its limit turns), and the step goes on." }),
              },
              { additionalProperties: false, description: "Every provider of its model (the primary and each fallback) asked to be left alone or is at its limit (AGENTFOREST_MODEL_LIMITS): a driven agent's next step waits, or the request of its running step does." },
            ),
          ],
          { description: 'What holds its next step (not handed out until `until`), or its running request; absent when nothing does.' },
        ),
      ),
      awaiting: Type.Optional(
        Type.Array(Type.Object({ id: Type.String(), name: Type.String() }, { additionalProperties: false }), {
          description: "The open step's tool calls still without a result, which the agent waits on (a backend's, a worker's, or an MCP call running); absent when none.",
        }),
      ),
    },
    { additionalProperties: false },
  ),
);
export type AgentView = Static<typeof AgentView>;

/** A root created or resumed: its view and the credential of this live incarnation. */
export const AgentWithToken = Type.Object(
  {
    agent: ref(AgentView),
    agentToken: Type.String({ description: 'The credential of this live incarnation (X-Agent-Token).' }),
  },
  { additionalProperties: false },
);
export type AgentWithToken = Static<typeof AgentWithToken>;

export const Credential = shared(
  'Credential',
  Type.Object({ agentId: AgentId, agentToken: Type.String() }, { additionalProperties: false, description: "A live incarnation's agent id and token." }),
);
export type AgentCredential = Static<typeof Credential>;

export const ChildCreated = Type.Object(
  {
    agent: ref(AgentView),
    agentToken: Type.String({ description: "The child's credential for this incarnation." }),
    messageId: Type.String({ description: "The prompt's message id: the child's first queued turn." }),
  },
  { additionalProperties: false },
);
export type ChildCreated = Static<typeof ChildCreated>;

/** The model-visible result of a failed tool call, on the errors of tool-call routes. */
export const ToolErrorResult = Type.Object(
  {
    isError: Type.Literal(true),
    content: Type.String({ description: 'The exact text a model should be shown: `Error: <message>`.' }),
  },
  { additionalProperties: false },
);

const ERROR_FIELDS = {
  statusCode: Type.Integer(),
  code: Type.Unsafe<ErrorCode>({ type: 'string', enum: [...WIRE_ERROR_CODES] }),
  error: Type.String({ description: 'The HTTP reason phrase.' }),
  message: Type.String(),
  location: Type.Optional(Type.String({ description: 'MISDIRECTED: the URL to send this request to (also in the Location header).' })),
};

export const ErrorBody = shared(
  'ErrorBody',
  Type.Object(ERROR_FIELDS, { additionalProperties: false, description: 'Every error response; each response lists the codes it can carry.' }),
);
export type ErrorBody = Static<typeof ErrorBody>;

export const ToolCallErrorBody = shared(
  'ToolCallErrorBody',
  Type.Object(
    { ...ERROR_FIELDS, toolResult: Type.Optional(ToolErrorResult) },
    { additionalProperties: false, description: 'An error of a tool-call route: the error body plus the `toolResult` a model should be shown.' },
  ),
);
export type ToolCallErrorBody = Static<typeof ToolCallErrorBody>;
