/**
 * Configuration from the environment: one TypeBox schema, the type derived from it, and a
 * loader that reports every problem at once in words an operator can act on.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { PACKAGE_NAMES, REPORT_DELIVERIES } from './domain/packages.js';
import { DEFAULT_DRIVER_OPTIONS } from './services/driver/model-driver.js';
import { parseBaseUrl } from './services/driver/model-policy.js';
import { DEFAULT_LIMITS, type Limits } from './services/limits.js';
import { redactUrl } from './services/stores/postgres-store.js';
import { SQLITE_SYNC_MODES } from './services/stores/sqlite-store.js';

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
const ON_OFF = ['on', 'off'] as const;

export const EnvSchema = Type.Object({
  HOST: Type.String({ default: '127.0.0.1', minLength: 1 }),
  PORT: Type.Integer({ default: 3000, minimum: 0, maximum: 65535 }),
  AGENTFOREST_DATA: Type.String({ default: './data/agentforest.db', minLength: 1 }),
  AGENTFOREST_API_KEYS: Type.String({ default: '' }),
  AGENTFOREST_DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  AGENTFOREST_INSTANCE_ID: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  AGENTFOREST_ADVERTISE_URL: Type.Optional(Type.String({ pattern: '^https?://' })),
  AGENTFOREST_LEASE_MS: Type.Integer({ default: 15_000, minimum: 300 }),
  AGENTFOREST_REPORT_DELIVERY: Type.Union(REPORT_DELIVERIES.map((d) => Type.Literal(d)), { default: 'quiet' }),
  AGENTFOREST_PACKAGES: Type.Optional(Type.String()),
  AGENTFOREST_BODY_LIMIT: Type.Integer({ default: 1_048_576, minimum: 1024 }),
  AGENTFOREST_DRAIN_TIMEOUT_MS: Type.Integer({ default: 10_000, minimum: 0 }),
  AGENTFOREST_IDEMPOTENCY_TTL_MS: Type.Integer({ default: 86_400_000, minimum: 1000 }),
  AGENTFOREST_EVENT_HEARTBEAT_MS: Type.Integer({ default: 15_000, minimum: 10 }),
  AGENTFOREST_EVENT_BUFFER_BYTES: Type.Integer({ default: 1_048_576, minimum: 1024 }),
  AGENTFOREST_SQLITE_SYNCHRONOUS: Type.Union(SQLITE_SYNC_MODES.map((m) => Type.Literal(m)), { default: 'full' }),
  AGENTFOREST_MAX_REPORT_BYTES: Type.Integer({ default: DEFAULT_LIMITS.reportBytes, minimum: 1 }),
  AGENTFOREST_MAX_CHILDREN: Type.Integer({ default: DEFAULT_LIMITS.childrenPerParent, minimum: 1 }),
  AGENTFOREST_MAX_DEPTH: Type.Integer({ default: DEFAULT_LIMITS.depth, minimum: 1 }),
  AGENTFOREST_MAX_LIVE_AGENTS: Type.Integer({ default: DEFAULT_LIMITS.liveAgents, minimum: 1 }),
  AGENTFOREST_MAX_INBOX: Type.Integer({ default: DEFAULT_LIMITS.inbox, minimum: 1 }),
  AGENTFOREST_MAX_WAITERS: Type.Integer({ default: DEFAULT_LIMITS.waitersPerAgent, minimum: 1 }),
  AGENTFOREST_RATE_LIMIT: Type.Integer({ default: 10_000, minimum: 0 }),
  AGENTFOREST_RATE_LIMIT_WINDOW_MS: Type.Integer({ default: 10_000, minimum: 100 }),
  AGENTFOREST_MAX_EVENT_LOOP_DELAY_MS: Type.Integer({ default: 1_000, minimum: 0 }),
  AGENTFOREST_WAKEUP_COALESCING: Type.Union(ON_OFF.map((v) => Type.Literal(v)), { default: 'off' }),
  AGENTFOREST_MODEL_TIMEOUT_MS: Type.Integer({ default: DEFAULT_DRIVER_OPTIONS.timeoutMs, minimum: 100, maximum: 3_600_000 }),
  AGENTFOREST_MODEL_RETRIES: Type.Integer({ default: DEFAULT_DRIVER_OPTIONS.retries, minimum: 0, maximum: 20 }),
  AGENTFOREST_MODEL_CONCURRENCY: Type.Integer({ default: DEFAULT_DRIVER_OPTIONS.concurrency, minimum: 1 }),
  AGENTFOREST_MODEL_KEY_ENVS: Type.Optional(Type.String()),
  AGENTFOREST_MODEL_BASE_URLS: Type.Optional(Type.String()),
  LOG_LEVEL: Type.Union(LOG_LEVELS.map((l) => Type.Literal(l)), { default: 'info' }),
});

export type Env = Static<typeof EnvSchema>;

export interface Config {
  host: string;
  port: number;
  /** `:memory:` selects the in-memory store; anything else is a SQLite file path. */
  dataPath: string;
  /** A PostgreSQL URL: when set, the PostgreSQL store is used and dataPath is ignored. */
  databaseUrl: string | undefined;
  /** With a database URL: this instance's lease identity, advertised URL (default from the listen address) and lease time. */
  instanceId: string | undefined;
  advertiseUrl: string | undefined;
  leaseMs: number;
  apiKeys: string[];
  reportDelivery: Env['AGENTFOREST_REPORT_DELIVERY'];
  packages: string[] | undefined;
  bodyLimit: number;
  drainTimeoutMs: number;
  idempotencyTtlMs: number;
  eventHeartbeatMs: number;
  eventBufferBytes: number;
  sqliteSynchronous: Env['AGENTFOREST_SQLITE_SYNCHRONOUS'];
  logLevel: Env['LOG_LEVEL'];
  limits: Limits;
  /** Operator-route requests per client per window; 0 turns rate limiting off. */
  rateLimit: { max: number; windowMs: number };
  /** Event-loop delay above which requests are shed with 503 OVERLOADED; 0 turns it off. */
  maxEventLoopDelayMs: number;
  /** Wakeup reports join the parent's queued wakeup turn instead of queueing one each. */
  coalesceWakeups: boolean;
  /** The built-in model driver: per-step timeout (retries included), retries, requests in flight. */
  driver: { timeoutMs: number; retries: number; concurrency: number };
  /** Which variables may serve as model API keys, which endpoints may be called (undefined: the defaults). */
  modelPolicy: { keyEnvs?: string[]; baseUrls?: string[] };
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
  // Integers must be written as plain digits: Value.Convert would turn "1e3" into 1 and "80.5" into 80.
  for (const [key, schema] of Object.entries(EnvSchema.properties)) {
    const value = raw[key];
    if (schema.type === 'integer' && value !== undefined && !/^\d+$/.test(value)) {
      problems.push(`${key}=${JSON.stringify(value)}: must be a whole number written in digits`);
    }
  }
  const converted = Value.Default(EnvSchema, Value.Convert(EnvSchema, { ...raw })) as Env;
  if (problems.length === 0) {
    for (const e of Value.Errors(EnvSchema, converted)) {
      const key = e.path.replace(/^\//, '');
      const shown = key === 'AGENTFOREST_DATABASE_URL' ? redactUrl(raw[key] ?? '') : (raw[key] ?? '');
      problems.push(`${key}=${JSON.stringify(shown)}: ${describe(key, e.message)}`);
    }
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
  const apiKeys = list(raw.AGENTFOREST_API_KEYS) ?? [];
  const host = raw.HOST ?? '127.0.0.1';
  if (!isLoopback(host) && apiKeys.length === 0) {
    problems.push(
      `HOST=${JSON.stringify(host)} is not a loopback address and AGENTFOREST_API_KEYS is empty: ` +
        'refusing to serve an unauthenticated API beyond this machine. Set AGENTFOREST_API_KEYS=<key>[,<key>...] or HOST=127.0.0.1.',
    );
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
    apiKeys,
    reportDelivery: converted.AGENTFOREST_REPORT_DELIVERY,
    packages,
    bodyLimit: converted.AGENTFOREST_BODY_LIMIT,
    drainTimeoutMs: converted.AGENTFOREST_DRAIN_TIMEOUT_MS,
    idempotencyTtlMs: converted.AGENTFOREST_IDEMPOTENCY_TTL_MS,
    eventHeartbeatMs: converted.AGENTFOREST_EVENT_HEARTBEAT_MS,
    eventBufferBytes: converted.AGENTFOREST_EVENT_BUFFER_BYTES,
    sqliteSynchronous: converted.AGENTFOREST_SQLITE_SYNCHRONOUS,
    logLevel: converted.LOG_LEVEL,
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
    driver: {
      timeoutMs: converted.AGENTFOREST_MODEL_TIMEOUT_MS,
      retries: converted.AGENTFOREST_MODEL_RETRIES,
      concurrency: converted.AGENTFOREST_MODEL_CONCURRENCY,
    },
    modelPolicy: { ...(keyEnvs === undefined ? {} : { keyEnvs }), ...(baseUrls === undefined ? {} : { baseUrls }) },
  };
}

function describe(name: string, message: string): string {
  switch (name) {
    case 'AGENTFOREST_REPORT_DELIVERY':
      return `must be one of ${REPORT_DELIVERIES.join(', ')}`;
    case 'AGENTFOREST_SQLITE_SYNCHRONOUS':
      return `must be one of ${SQLITE_SYNC_MODES.join(', ')}`;
    case 'LOG_LEVEL':
      return `must be one of ${LOG_LEVELS.join(', ')}`;
    case 'AGENTFOREST_DATABASE_URL':
      return 'must be a postgres:// or postgresql:// URL';
    case 'AGENTFOREST_WAKEUP_COALESCING':
      return `must be one of ${ON_OFF.join(', ')}`;
    default:
      return message;
  }
}

/** True for addresses that only this machine can reach. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}
