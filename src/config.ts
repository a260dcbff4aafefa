/**
 * Configuration from the environment: one TypeBox schema, the type derived from it, and a
 * loader that reports every problem at once in words an operator can act on.
 */
import { DEFAULT_DELIVERY } from './observation/webhooks/delivery-worker.js';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { PACKAGE_NAMES, REPORT_DELIVERIES, SETTLEMENT_NOTICE_MODES } from './domain/packages.js';
import { NO_PRICES, parseModelPrices, type ModelPrices } from './domain/pricing.js';
import { DEFAULT_CONFIRM_MS } from './cluster/cluster-packages.js';
import { DEFAULT_TOOL_SERVER_CONCURRENCY } from './tools/mcp/tool-servers.js';
import { DEFAULT_APPROVAL_TIMEOUT_MS } from './approvals/approvals.js';
import { DEFAULT_LEASE } from './steps/step-lease.js';
import { DEFAULT_DRIVER_OPTIONS } from './driver/model-driver.js';
import { parseBaseUrl } from './driver/model-policy.js';
import { NO_LIMITS, parseModelLimits, type ModelLimits } from './driver/provider-limits.js';
import { DEFAULT_STEP_CACHE_BYTES } from './steps/step-cache.js';
import { DEFAULT_LIMITS, type Limits } from './agents/limits.js';
import { redactUrl, SQLITE_SYNC_MODES } from './domain/store-settings.js';
import { tracesWanted } from './observation/tracing/tracing.js';
import { unknownVariables } from './unknown-variables.js';

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
const ON_OFF = ['on', 'off'] as const;

export const EnvSchema = Type.Object({
  HOST: Type.String({ default: '127.0.0.1', minLength: 1, description: 'Listen address; a non-loopback address requires AGENTFOREST_API_KEYS.' }),
  PORT: Type.Integer({ default: 3000, minimum: 0, maximum: 65535, description: 'Listen port; 0 picks a free one.' }),
  AGENTFOREST_DATA: Type.String({ default: './data/agentforest.db', minLength: 1, description: 'SQLite file, created with its directory; `:memory:` selects the in-memory store.' }),
  AGENTFOREST_API_KEYS: Type.String({ default: '', description: 'Comma-separated operator keys; when set, every `/v1` route needs `Authorization: Bearer <key>`.' }),
  AGENTFOREST_DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://', description: '`postgres://user:password@host:port/db`: use the PostgreSQL store (with forest leases) instead of AGENTFOREST_DATA.' })),
  AGENTFOREST_INSTANCE_ID: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'This instance\'s identity in forest leases (PostgreSQL only); random when unset. Set one that survives restarts (a container or unit name): a restarted instance with the same id takes its forests back at once.' })),
  AGENTFOREST_ADVERTISE_URL: Type.Optional(Type.String({ pattern: '^https?://', description: 'The URL other instances send misdirected clients to; unset, the listen address. Set it behind a proxy or when listening on 0.0.0.0.' })),
  AGENTFOREST_LEASE_MS: Type.Integer({ default: 15_000, minimum: 300, description: 'How long a forest lease lasts without renewal; a dead instance\'s forests can be resumed elsewhere after this.' }),
  AGENTFOREST_CONFIG_CONFIRM_MS: Type.Integer({ default: DEFAULT_CONFIRM_MS, minimum: 0, maximum: 600_000, description: 'With several instances (PostgreSQL): how long a PUT or DELETE on /v1/packages waits for every other instance holding a forest lease to apply the change; one that does not is named in the answer (`unconfirmed`) and cannot deliver a report until it catches up.' }),
  AGENTFOREST_REPORT_DELIVERY: Type.Union(REPORT_DELIVERIES.map((d) => Type.Literal(d)), { default: 'quiet', description: 'How a child\'s report reaches its parent: `quiet` adds context without a turn, `wakeup` queues one parent turn, `next-step` joins the next step of the parent\'s open turn (with none open, it queues like `wakeup`).' }),
  AGENTFOREST_SETTLEMENT_NOTICES: Type.Union(SETTLEMENT_NOTICE_MODES.map((m) => Type.Literal(m)), { default: 'off', description: 'Which turn ends of a continuable child put one quiet notice (context, never a turn) in its live parent: `off`, `failures` (failed turns, with the error) or `all`. Needs the `subagent-report` package.' }),
  AGENTFOREST_PACKAGES: Type.Optional(Type.String({ description: 'Comma-separated packages to install at start-up (`subagent`, `subagent-control`, `subagent-report`); unset, all of them. With PostgreSQL, this and the two report options only seed a fresh database: the database\'s configuration is the cluster\'s.' })),
  AGENTFOREST_BODY_LIMIT: Type.Integer({ default: 1_048_576, minimum: 1024, description: 'Request body limit in bytes (413 PAYLOAD_TOO_LARGE beyond).' }),
  AGENTFOREST_DRAIN_TIMEOUT_MS: Type.Integer({ default: 10_000, minimum: 0, description: 'How long SIGTERM waits for in-flight model requests to be recorded and open requests to finish; then the connections still open are closed.' }),
  AGENTFOREST_REQUEST_TIMEOUT_MS: Type.Integer({ default: 30_000, minimum: 1000, description: 'How long a client may take to send a whole request, headers and body (408 and the connection closed beyond). A long-poll or an event stream is not limited by it once its request is in.' }),
  AGENTFOREST_HEADERS_TIMEOUT_MS: Type.Integer({ default: 10_000, minimum: 1000, description: "How long a client may take to send a request's headers (408 and the connection closed beyond); at most AGENTFOREST_REQUEST_TIMEOUT_MS." }),
  AGENTFOREST_KEEP_ALIVE_TIMEOUT_MS: Type.Integer({ default: 72_000, minimum: 1000, description: 'How long an idle keep-alive connection stays open.' }),
  AGENTFOREST_MAX_CONNECTIONS: Type.Integer({ default: 10_000, minimum: 1, description: 'Open client connections (event streams and long-polls included); a connection beyond is closed at once, and the log counts them.' }),
  AGENTFOREST_IDEMPOTENCY_TTL_MS: Type.Integer({ default: 86_400_000, minimum: 1000, description: 'How long `Idempotency-Key` results are kept.' }),
  AGENTFOREST_EVENT_HEARTBEAT_MS: Type.Integer({ default: 15_000, minimum: 10, description: 'Interval of the heartbeat comment on event streams.' }),
  AGENTFOREST_EVENT_BUFFER_BYTES: Type.Integer({ default: 1_048_576, minimum: 1024, description: 'Unread bytes an event-stream consumer may leave before it is cut off.' }),
  AGENTFOREST_SQLITE_SYNCHRONOUS: Type.Union(SQLITE_SYNC_MODES.map((m) => Type.Literal(m)), { default: 'full', description: '`full`: a commit survives power loss; `normal`: it survives a process crash.' }),
  AGENTFOREST_MAX_REPORT_BYTES: Type.Integer({ default: DEFAULT_LIMITS.reportBytes, minimum: 1, description: 'UTF-8 bytes of one report\'s output (413 PAYLOAD_TOO_LARGE beyond).' }),
  AGENTFOREST_MAX_CHILDREN: Type.Integer({ default: DEFAULT_LIMITS.childrenPerParent, minimum: 1, description: 'Live children of one agent (409 LIMIT_EXCEEDED beyond).' }),
  AGENTFOREST_MAX_DEPTH: Type.Integer({ default: DEFAULT_LIMITS.depth, minimum: 1, description: 'Depth of the deepest child, a root being 0 (409 LIMIT_EXCEEDED beyond).' }),
  AGENTFOREST_MAX_LIVE_AGENTS: Type.Integer({ default: DEFAULT_LIMITS.liveAgents, minimum: 1, description: 'Live agents in this process (503 AT_CAPACITY beyond).' }),
  AGENTFOREST_MAX_INBOX: Type.Integer({ default: DEFAULT_LIMITS.inbox, minimum: 1, description: 'Messages one agent holds accepted and not yet logged: queued, steering, staged (429 AGENT_BUSY, or PARENT_BUSY for a report).' }),
  AGENTFOREST_MAX_WAITERS: Type.Integer({ default: DEFAULT_LIMITS.waitersPerAgent, minimum: 1, description: 'Concurrent step long-polls and event streams per agent, and forest streams per root (429 AGENT_BUSY beyond).' }),
  AGENTFOREST_RATE_LIMIT: Type.Integer({ default: 10_000, minimum: 0, description: 'Operator-only requests per client per window (429 RATE_LIMITED beyond); 0 turns rate limiting off.' }),
  AGENTFOREST_RATE_LIMIT_WINDOW_MS: Type.Integer({ default: 10_000, minimum: 100, description: 'The rate-limit window.' }),
  AGENTFOREST_MAX_EVENT_LOOP_DELAY_MS: Type.Integer({ default: 1_000, minimum: 0, description: 'Mean event-loop delay above which requests are shed (503 OVERLOADED); 0 turns shedding off.' }),
  AGENTFOREST_WAKEUP_COALESCING: Type.Union(ON_OFF.map((v) => Type.Literal(v)), { default: 'off', description: '`on`: a wakeup report joins the parent\'s queued wakeup turn instead of queueing a turn of its own.' }),
  AGENTFOREST_STEP_LEASE_MS: Type.Integer({ default: DEFAULT_LEASE.leaseMs, minimum: 100, maximum: 86_400_000, description: 'How long a claimed step is held without a heartbeat or an output; then it is claimable again as the next attempt.' }),
  AGENTFOREST_STEP_MAX_ATTEMPTS: Type.Integer({ default: DEFAULT_LEASE.maxAttempts, minimum: 1, maximum: 100, description: 'Claims a step may have; when the lease of the last one expires too, its turn ends `failed`.' }),
  AGENTFOREST_STEP_CACHE_MB: Type.Integer({ default: DEFAULT_STEP_CACHE_BYTES / 2 ** 20, minimum: 0, description: "What the rendered conversations of full-form steps may hold in memory, over all agents (MiB); past it the least recently stepped agent's is dropped and rebuilt from the store when needed. 0 keeps none." }),
  AGENTFOREST_MODEL_TIMEOUT_MS: Type.Integer({ default: DEFAULT_DRIVER_OPTIONS.timeoutMs, minimum: 100, maximum: 3_600_000, description: 'Built-in model driver: the deadline of one step, retries and backoff included.' }),
  AGENTFOREST_MODEL_MAX_BACKOFF_MS: Type.Integer({
    default: DEFAULT_DRIVER_OPTIONS.maxProviderBackoffMs,
    minimum: 0,
    maximum: 86_400_000,
    description: "Built-in model driver: the longest a provider's Retry-After is waited for; a longer one fails the step's attempt at once, with the provider's answer.",
  }),
  AGENTFOREST_MODEL_STREAM: Type.Union([Type.Literal('true'), Type.Literal('false')], {
    default: 'true',
    description: "Built-in model driver: `true` asks endpoints to stream answers (`stream: true`), published as they arrive as `delta` events; `false` for an endpoint that cannot stream (its answer then goes out as deltas all at once).",
  }),
  AGENTFOREST_MODEL_RETRIES: Type.Integer({ default: DEFAULT_DRIVER_OPTIONS.retries, minimum: 0, maximum: 20, description: 'Built-in model driver: retries after a 429, a 5xx or a connection failure.' }),
  AGENTFOREST_MODEL_CONCURRENCY: Type.Integer({ default: DEFAULT_DRIVER_OPTIONS.concurrency, minimum: 1, description: 'Built-in model driver: model requests in flight at once, over all agents.' }),
  AGENTFOREST_MODEL_KEY_ENVS: Type.Optional(Type.String({ description: 'Comma-separated variables that `model.apiKeyEnv`, and a tool server\'s `{env}` header or variable, may name; unset, any name ending in `_API_KEY` except `AGENTFOREST_*`.' })),
  AGENTFOREST_MODEL_BASE_URLS: Type.Optional(Type.String({ description: 'Comma-separated URL prefixes that `model.baseUrl`, and the URL of a tool server given a secret by `{env}`, must start with; unset, any http(s) URL.' })),
  AGENTFOREST_MODEL_PRICES: Type.Optional(
    Type.String({
      description:
        'Per-model prices that give usage its `costMicroUsd` (for `costMicroUsd` budgets): JSON `{"<model>": {"prompt": <n>, "completion": <n>}}`, ' +
        'each in micro-dollars per token (the same number as dollars per million tokens); the key `*` prices any other model. Unset: usage has a cost only when a backend posts one.',
    }),
  ),
  AGENTFOREST_MODEL_LIMITS: Type.Optional(
    Type.String({
      description:
        'Built-in model driver: requests and tokens per minute each provider may be sent, as JSON ' +
        '`[{"baseUrl": "<url>", "model": "<model>", "requestsPerMinute": <n>, "tokensPerMinute": <n>}, ...]` (either limit may be left out, not both). ' +
        'An entry without `model` holds for every model at that base URL, each counted on its own; one naming the model replaces it for that model. ' +
        'Fixed UTC minutes; tokens are those of the answers (`totalTokens`). A model whose primary is at its limit asks a fallback with room; a step whose every provider is ' +
        'at its limit waits for the minute to turn (the agent view says `waiting: {"reason": "rate-limited"}`). Several instances share the counts within about a second. Unset: no limits.',
    }),
  ),
  AGENTFOREST_SPAWN_BUDGETS: Type.Union(ON_OFF.map((v) => Type.Literal(v)), { default: 'off', description: '`on`: `spawn_subagent` takes a `budget` grant from the model (shown in its input schema); `off`: the model cannot grant.' }),
  AGENTFOREST_TOOL_SERVER_COMMANDS: Type.Union(ON_OFF.map((v) => Type.Literal(v)), {
    default: 'off',
    description: '`on`: an MCP tool server may be registered as a `command` the service runs and speaks to over stdio; `off`: only `url` servers.',
  }),
  AGENTFOREST_APPROVAL_TIMEOUT_MS: Type.Integer({
    default: DEFAULT_APPROVAL_TIMEOUT_MS,
    minimum: 1,
    maximum: 365 * 24 * 60 * 60 * 1000,
    description: 'How long an approval waits for a decision; then it expires and the call gets an error result (default 24 h).',
  }),
  AGENTFOREST_TOOL_SERVER_CONCURRENCY: Type.Integer({ default: DEFAULT_TOOL_SERVER_CONCURRENCY, minimum: 1, maximum: 1024, description: 'Calls in flight to one MCP tool server at most; more wait their turn.' }),
  AGENTFOREST_WEBHOOK_ALLOW_PRIVATE: Type.Union([Type.Literal('true'), Type.Literal('false')], {
    default: 'false',
    description: '`true`: webhook URLs may name loopback, link-local and private addresses (self-hosted receivers, tests); `false`: such addresses are refused, after DNS resolution, at subscription and at every delivery.',
  }),
  AGENTFOREST_WEBHOOK_MAX_AGE_MS: Type.Integer({ default: DEFAULT_DELIVERY.maxAgeMs, minimum: 1000, description: 'How long a webhook delivery is retried (5xx, 429, network errors) from when its event was queued; then it is marked failed.' }),
  AGENTFOREST_WEBHOOK_TIMEOUT_MS: Type.Integer({ default: DEFAULT_DELIVERY.timeoutMs, minimum: 100, maximum: 120_000, description: 'The deadline of one webhook request, connection included.' }),
  AGENTFOREST_WEBHOOK_BACKOFF_MS: Type.Integer({ default: DEFAULT_DELIVERY.backoff.baseMs, minimum: 10, maximum: 3_600_000, description: 'The first retry delay of a webhook delivery; each later one doubles (with jitter), up to an hour.' }),
  AGENTFOREST_WEBHOOK_PER_ENDPOINT: Type.Integer({ default: DEFAULT_DELIVERY.perEndpoint, minimum: 1, maximum: 256, description: 'Webhook requests in flight to one origin at most (each subscription and forest sends in order, one at a time).' }),
  AGENTFOREST_OTEL_CONTENT: Type.Union(ON_OFF.map((v) => Type.Literal(v)), {
    default: 'off',
    description: '`on`: traces carry message content, tool arguments and results (`gen_ai.input.messages` and the like); `off`: only names, ids and token counts. Traces are exported when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set.',
  }),
  LOG_LEVEL: Type.Union(LOG_LEVELS.map((l) => Type.Literal(l)), { default: 'info', description: 'pino log level.' }),
});

export type Env = Static<typeof EnvSchema>;

/**
 * The parsed configuration. Every field that is one variable read as-is takes its type from
 * the schema (`Env[...]`), so a change to the schema reaches every reader; the rest are lists
 * split on commas, or groups of variables.
 */
export interface Config {
  /** What to warn about at start: `AGENTFOREST_*` variables that are no setting (see unknown-variables.ts). */
  warnings: string[];
  host: Env['HOST'];
  port: Env['PORT'];
  /** `:memory:` selects the in-memory store; anything else is a SQLite file path. */
  dataPath: Env['AGENTFOREST_DATA'];
  /** A PostgreSQL URL: when set, the PostgreSQL store is used and dataPath is ignored. */
  databaseUrl: Env['AGENTFOREST_DATABASE_URL'];
  /** With a database URL: this instance's lease identity, advertised URL (default from the listen address) and lease time. */
  instanceId: Env['AGENTFOREST_INSTANCE_ID'];
  advertiseUrl: Env['AGENTFOREST_ADVERTISE_URL'];
  leaseMs: Env['AGENTFOREST_LEASE_MS'];
  /** With a database URL: how long a package change waits for the other instances to apply it. */
  configConfirmMs: Env['AGENTFOREST_CONFIG_CONFIRM_MS'];
  apiKeys: string[];
  reportDelivery: Env['AGENTFOREST_REPORT_DELIVERY'];
  settlementNotices: Env['AGENTFOREST_SETTLEMENT_NOTICES'];
  packages: string[] | undefined;
  bodyLimit: Env['AGENTFOREST_BODY_LIMIT'];
  drainTimeoutMs: Env['AGENTFOREST_DRAIN_TIMEOUT_MS'];
  /** Deadlines on clients: a whole request, its headers, an idle keep-alive connection. */
  timeouts: { requestMs: Env['AGENTFOREST_REQUEST_TIMEOUT_MS']; headersMs: Env['AGENTFOREST_HEADERS_TIMEOUT_MS']; keepAliveMs: Env['AGENTFOREST_KEEP_ALIVE_TIMEOUT_MS'] };
  maxConnections: Env['AGENTFOREST_MAX_CONNECTIONS'];
  idempotencyTtlMs: Env['AGENTFOREST_IDEMPOTENCY_TTL_MS'];
  eventHeartbeatMs: Env['AGENTFOREST_EVENT_HEARTBEAT_MS'];
  eventBufferBytes: Env['AGENTFOREST_EVENT_BUFFER_BYTES'];
  sqliteSynchronous: Env['AGENTFOREST_SQLITE_SYNCHRONOUS'];
  logLevel: Env['LOG_LEVEL'];
  limits: Limits;
  /** Operator-route requests per client per window; 0 turns rate limiting off. */
  rateLimit: { max: Env['AGENTFOREST_RATE_LIMIT']; windowMs: Env['AGENTFOREST_RATE_LIMIT_WINDOW_MS'] };
  /** Event-loop delay above which requests are shed with 503 OVERLOADED; 0 turns it off. */
  maxEventLoopDelayMs: Env['AGENTFOREST_MAX_EVENT_LOOP_DELAY_MS'];
  /** Wakeup reports join the parent's queued wakeup turn instead of queueing one each. */
  coalesceWakeups: boolean;
  /** The step cache's bound, in bytes. */
  stepCacheBytes: number;
  /** Step leases: their length and how many claims a step may have. */
  lease: { leaseMs: Env['AGENTFOREST_STEP_LEASE_MS']; maxAttempts: Env['AGENTFOREST_STEP_MAX_ATTEMPTS'] };
  /** The built-in model driver: per-step timeout (retries included), retries, requests in flight. */
  driver: {
    timeoutMs: Env['AGENTFOREST_MODEL_TIMEOUT_MS'];
    retries: Env['AGENTFOREST_MODEL_RETRIES'];
    maxProviderBackoffMs: Env['AGENTFOREST_MODEL_MAX_BACKOFF_MS'];
    concurrency: Env['AGENTFOREST_MODEL_CONCURRENCY'];
    stream: boolean;
  };
  /** Which variables may serve as model API keys, which endpoints may be called (undefined: the defaults). */
  modelPolicy: { keyEnvs?: string[]; baseUrls?: string[] };
  modelPrices: ModelPrices;
  /** AGENTFOREST_MODEL_LIMITS (NO_LIMITS when unset). */
  modelLimits: ModelLimits;
  spawnBudgets: boolean;
  /** MCP tool servers: stdio commands allowed, calls in flight to one server. */
  toolServers: { commands: boolean; concurrency: number };
  /** AGENTFOREST_APPROVAL_TIMEOUT_MS. */
  approvalTimeoutMs: number;
  /**
   * Traces: exported over OTLP/HTTP when the standard OpenTelemetry variables ask for it (the
   * exporter reads the endpoint, headers and timeout itself), under OTEL_SERVICE_NAME.
   */
  tracing: { export: boolean; serviceName: string; content: boolean };
  /** Webhook delivery. */
  webhooks: { allowPrivate: boolean; maxAgeMs: number; timeoutMs: number; backoffMs: number; perEndpoint: number };
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/** Reads and validates the environment; throws ConfigError listing every problem. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const raw: Record<string, string> = {};
  for (const key of Object.keys(EnvSchema.properties)) {
    const value = env[key];
    if (value !== undefined && value.trim() !== '') raw[key] = value.trim();
  }
  const problems: string[] = [];
  /** Variables already refused: every problem goes in one message, each variable named once. */
  const refused = new Set<string>();
  // Integers must be written as plain digits: Value.Convert would turn "1e3" into 1 and "80.5" into 80.
  for (const [key, schema] of Object.entries(EnvSchema.properties)) {
    const value = raw[key];
    if (schema.type === 'integer' && value !== undefined && !/^\d+$/.test(value)) {
      problems.push(`${key}=${JSON.stringify(value)}: must be a whole number written in digits`);
      refused.add(key);
    }
  }
  const converted = Value.Default(EnvSchema, Value.Convert(EnvSchema, { ...raw })) as Env;
  for (const e of Value.Errors(EnvSchema, converted)) {
    const key = e.path.replace(/^\//, '');
    if (refused.has(key)) continue;
    refused.add(key);
    const shown = key === 'AGENTFOREST_DATABASE_URL' ? redactUrl(raw[key] ?? '') : (raw[key] ?? '');
    problems.push(`${key}=${JSON.stringify(shown)}: ${describe(key, e.message)}`);
  }
  /** A comma-separated list, blanks dropped; undefined when the variable is unset. */
  const list = (value: string | undefined): string[] | undefined => value?.split(',').map((v) => v.trim()).filter((v) => v !== '');
  const packages = list(raw.AGENTFOREST_PACKAGES);
  const unknownPackages = (packages ?? []).filter((p) => !(PACKAGE_NAMES as readonly string[]).includes(p));
  if (unknownPackages.length > 0) {
    problems.push(`AGENTFOREST_PACKAGES: unknown package(s) ${unknownPackages.join(', ')}; known: ${PACKAGE_NAMES.join(', ')}`);
  }
  const keyEnvs = list(raw.AGENTFOREST_MODEL_KEY_ENVS);
  const baseUrls = list(raw.AGENTFOREST_MODEL_BASE_URLS);
  for (const url of baseUrls ?? []) {
    try {
      parseBaseUrl(url, 'AGENTFOREST_MODEL_BASE_URLS');
    } catch (error) {
      problems.push(error instanceof Error ? error.message : String(error));
    }
  }
  let modelPrices: ModelPrices = NO_PRICES;
  if (raw.AGENTFOREST_MODEL_PRICES !== undefined) {
    try {
      modelPrices = parseModelPrices(raw.AGENTFOREST_MODEL_PRICES);
    } catch (error) {
      problems.push(`AGENTFOREST_MODEL_PRICES ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  let modelLimits: ModelLimits = NO_LIMITS;
  if (raw.AGENTFOREST_MODEL_LIMITS !== undefined) {
    try {
      modelLimits = parseModelLimits(raw.AGENTFOREST_MODEL_LIMITS);
    } catch (error) {
      problems.push(`AGENTFOREST_MODEL_LIMITS ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  if (!refused.has('AGENTFOREST_HEADERS_TIMEOUT_MS') && !refused.has('AGENTFOREST_REQUEST_TIMEOUT_MS') && converted.AGENTFOREST_HEADERS_TIMEOUT_MS > converted.AGENTFOREST_REQUEST_TIMEOUT_MS) {
    problems.push(
      `AGENTFOREST_HEADERS_TIMEOUT_MS=${converted.AGENTFOREST_HEADERS_TIMEOUT_MS} is longer than AGENTFOREST_REQUEST_TIMEOUT_MS=${converted.AGENTFOREST_REQUEST_TIMEOUT_MS}: ` +
        'the headers are part of the request; make it at most the request timeout',
    );
  }
  const apiKeys = list(raw.AGENTFOREST_API_KEYS) ?? [];
  const host = raw.HOST ?? '127.0.0.1';
  if (!isLoopback(host) && apiKeys.length === 0) {
    problems.push(
      `HOST=${JSON.stringify(host)} is not a loopback address and AGENTFOREST_API_KEYS is empty: ` +
        'refusing to serve an unauthenticated API beyond this machine. Set AGENTFOREST_API_KEYS=<key>[,<key>...] or HOST=127.0.0.1.',
    );
  }
  const exportTraces = tracesWanted(env);
  if (exportTraces) {
    for (const key of ['OTEL_EXPORTER_OTLP_PROTOCOL', 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL']) {
      const protocol = env[key]?.trim();
      if (protocol !== undefined && protocol !== '' && protocol !== 'http/json') {
        problems.push(`${key}=${JSON.stringify(protocol)}: traces are exported as OTLP over HTTP with JSON only; set it to http/json or unset it`);
      }
    }
  }
  if (problems.length > 0) throw new ConfigError(`invalid configuration:\n  - ${[...new Set(problems)].join('\n  - ')}`);
  return {
    host: converted.HOST,
    port: converted.PORT,
    dataPath: converted.AGENTFOREST_DATA,
    databaseUrl: converted.AGENTFOREST_DATABASE_URL,
    instanceId: converted.AGENTFOREST_INSTANCE_ID,
    advertiseUrl: converted.AGENTFOREST_ADVERTISE_URL,
    leaseMs: converted.AGENTFOREST_LEASE_MS,
    configConfirmMs: converted.AGENTFOREST_CONFIG_CONFIRM_MS,
    apiKeys,
    reportDelivery: converted.AGENTFOREST_REPORT_DELIVERY,
    settlementNotices: converted.AGENTFOREST_SETTLEMENT_NOTICES,
    packages,
    bodyLimit: converted.AGENTFOREST_BODY_LIMIT,
    drainTimeoutMs: converted.AGENTFOREST_DRAIN_TIMEOUT_MS,
    timeouts: {
      requestMs: converted.AGENTFOREST_REQUEST_TIMEOUT_MS,
      headersMs: converted.AGENTFOREST_HEADERS_TIMEOUT_MS,
      keepAliveMs: converted.AGENTFOREST_KEEP_ALIVE_TIMEOUT_MS,
    },
    maxConnections: converted.AGENTFOREST_MAX_CONNECTIONS,
    idempotencyTtlMs: converted.AGENTFOREST_IDEMPOTENCY_TTL_MS,
    eventHeartbeatMs: converted.AGENTFOREST_EVENT_HEARTBEAT_MS,
    eventBufferBytes: converted.AGENTFOREST_EVENT_BUFFER_BYTES,
    sqliteSynchronous: converted.AGENTFOREST_SQLITE_SYNCHRONOUS,
    logLevel: converted.LOG_LEVEL,
    warnings: unknownVariables(env, Object.keys(EnvSchema.properties)),
    limits: {
      reportBytes: converted.AGENTFOREST_MAX_REPORT_BYTES,
      childrenPerParent: converted.AGENTFOREST_MAX_CHILDREN,
      depth: converted.AGENTFOREST_MAX_DEPTH,
      liveAgents: converted.AGENTFOREST_MAX_LIVE_AGENTS,
      inbox: converted.AGENTFOREST_MAX_INBOX,
      waitersPerAgent: converted.AGENTFOREST_MAX_WAITERS,
    },
    rateLimit: { max: converted.AGENTFOREST_RATE_LIMIT, windowMs: converted.AGENTFOREST_RATE_LIMIT_WINDOW_MS },
    maxEventLoopDelayMs: converted.AGENTFOREST_MAX_EVENT_LOOP_DELAY_MS,
    coalesceWakeups: converted.AGENTFOREST_WAKEUP_COALESCING === 'on',
    stepCacheBytes: converted.AGENTFOREST_STEP_CACHE_MB * 2 ** 20,
    lease: { leaseMs: converted.AGENTFOREST_STEP_LEASE_MS, maxAttempts: converted.AGENTFOREST_STEP_MAX_ATTEMPTS },
    driver: {
      timeoutMs: converted.AGENTFOREST_MODEL_TIMEOUT_MS,
      retries: converted.AGENTFOREST_MODEL_RETRIES,
      maxProviderBackoffMs: converted.AGENTFOREST_MODEL_MAX_BACKOFF_MS,
      concurrency: converted.AGENTFOREST_MODEL_CONCURRENCY,
      stream: converted.AGENTFOREST_MODEL_STREAM === 'true',
    },
    modelPolicy: { ...(keyEnvs === undefined ? {} : { keyEnvs }), ...(baseUrls === undefined ? {} : { baseUrls }) },
    modelPrices,
    modelLimits,
    spawnBudgets: converted.AGENTFOREST_SPAWN_BUDGETS === 'on',
    toolServers: { commands: converted.AGENTFOREST_TOOL_SERVER_COMMANDS === 'on', concurrency: converted.AGENTFOREST_TOOL_SERVER_CONCURRENCY },
    approvalTimeoutMs: converted.AGENTFOREST_APPROVAL_TIMEOUT_MS,
    tracing: {
      export: exportTraces,
      serviceName: env.OTEL_SERVICE_NAME?.trim() || 'agentforest',
      content: converted.AGENTFOREST_OTEL_CONTENT === 'on',
    },
    webhooks: {
      allowPrivate: converted.AGENTFOREST_WEBHOOK_ALLOW_PRIVATE === 'true',
      maxAgeMs: converted.AGENTFOREST_WEBHOOK_MAX_AGE_MS,
      timeoutMs: converted.AGENTFOREST_WEBHOOK_TIMEOUT_MS,
      backoffMs: converted.AGENTFOREST_WEBHOOK_BACKOFF_MS,
      perEndpoint: converted.AGENTFOREST_WEBHOOK_PER_ENDPOINT,
    },
  };
}

function describe(name: string, message: string): string {
  const allowed = allowedValues(name);
  if (allowed !== undefined) return `must be one of ${allowed.join(', ')}`;
  if (name === 'AGENTFOREST_DATABASE_URL') return 'must be a postgres:// or postgresql:// URL';
  return message;
}

/** The literal values a variable accepts, read from its schema; undefined for free values. */
export function allowedValues(name: string): string[] | undefined {
  const schema: unknown = (EnvSchema.properties as Record<string, unknown>)[name];
  const anyOf = (schema as { anyOf?: { const?: unknown }[] } | undefined)?.anyOf;
  if (anyOf === undefined || !anyOf.every((s) => typeof s.const === 'string')) return undefined;
  return anyOf.map((s) => s.const as string);
}

/** True for addresses that only this machine can reach. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}
