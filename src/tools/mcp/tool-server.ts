/**
 * One registered MCP tool server in this process: its configuration, its connection, the tools
 * it listed, and its bound on calls at once. Its tools enter the registry only once it is
 * active (its registration durable, the server it replaces closed); until then it is reached
 * and listed, nothing more. A server that cannot be reached is `unreachable` and tried again,
 * less often each time; a tool list the server says changed is listed again. Secrets named by
 * environment variable are read each time the server is reached.
 *
 * A tenant's server (its configuration says whose) lends its tools to that tenant's agents
 * only, is connected to through the address guard (public addresses only), and is never
 * started as a command, whoever stored it and wherever it was stored. Before every request it
 * sends, its secrets are checked to be lent to its tenant still (tool-server-config.ts
 * `unlentSecret`): one that is not makes the request fail unsent, and the server unreachable
 * saying which variable is no longer its tenant's.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import type { Logger } from 'pino';
import type { ToolServerView } from '../../contract/index.js';
import { DEFAULT_TOOL_SERVER_TIMEOUT_MS, type SecretValue, type ToolServerConfig, type ToolServerState } from '../../domain/tool-servers.js';
import type { ModelPolicy } from '../../driver/model-policy.js';
import type { ServiceTool } from '../tool-registry.js';
import { McpConnection, type McpCallOutcome, type McpTool, type ToolServerEndpoint } from './mcp-connection.js';
import { mcpServiceTool } from './mcp-tool.js';
import { Semaphore } from './semaphore.js';
import { unlentSecret } from './tool-server-config.js';

export interface ToolServerDeps {
  /** Installs a tool for every agent granted it; returns its removal. */
  register: (tool: ServiceTool) => () => void;
  /** Which variables are lent as secrets, to whom (a tenant's server's are checked again before every request); its `env` is where they are read. */
  policy: ModelPolicy;
  /** Calls to one server at once. */
  concurrency: number;
  /** stdio servers may be started here (AGENTFOREST_TOOL_SERVER_COMMANDS=on on this instance). */
  commands: boolean;
  /** Its connections pass the address guard (a tenant's server; tool-servers.ts decides the policy). */
  addressGuard: { allowPrivate: boolean } | undefined;
  logger: Logger;
  /** Told a call's outcome and how long it took (metrics). */
  onCall?: (server: string, outcome: McpCallOutcome['kind'] | 'error', seconds: number) => void;
}

const RETRY_FIRST_MS = 1_000;
const RETRY_MAX_MS = 60_000;

export class ToolServer {
  private connection: McpConnection | undefined;
  private state: ToolServerState = 'unreachable';
  private error: string | undefined = 'not yet reached';
  private listed: McpTool[] = [];
  private removals: (() => void)[] = [];
  private readonly slots: Semaphore;
  private retry: NodeJS.Timeout | undefined;
  private retryMs = RETRY_FIRST_MS;
  private closed = false;
  /** Its tools are in the registry (see `activate`). */
  private active = false;
  /** Connecting and listing run one at a time. */
  private work: Promise<void> = Promise.resolve();

  constructor(
    readonly name: string,
    readonly config: ToolServerConfig,
    /** When this configuration was stored (tells a changed one from the same one). */
    readonly updatedAt: string,
    private readonly deps: ToolServerDeps,
  ) {
    this.slots = new Semaphore(deps.concurrency);
  }

  /** The tenant whose server it is; undefined: global. */
  get tenantId(): string | undefined {
    return this.config.tenantId;
  }

  /** Calls waiting for one of its slots. */
  get queued(): number {
    return this.slots.waiting;
  }

  get timeoutMs(): number {
    return this.config.timeoutMs ?? DEFAULT_TOOL_SERVER_TIMEOUT_MS;
  }

  view(): ToolServerView {
    const view: ToolServerView = {
      name: this.name,
      transport: this.config.transport,
      state: this.state,
      tools: this.allowed().map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema })),
    };
    if (this.error !== undefined) view.error = this.error;
    if (this.config.tenantId !== undefined) view.tenantId = this.config.tenantId;
    return view;
  }

  /** Reach the server and list its tools (once at a time); never throws: a failure is the state. */
  connect(): Promise<void> {
    this.work = this.work.then(() => this.reach());
    return this.work;
  }

  /** Put its tools, as last listed, in the registry; from now on a new listing replaces them there. */
  activate(): void {
    this.active = true;
    this.install(this.listed);
  }

  /** Call one of its tools: bounded by the server's slots; an unreachable server is tried again. */
  async call(tool: string, input: Record<string, unknown>, effectKey: string, signal: AbortSignal | undefined): Promise<McpCallOutcome> {
    const started = performance.now();
    const release = await this.slots.acquire(signal);
    try {
      const connection = this.connection;
      const outcome: McpCallOutcome = connection === undefined
        ? { kind: 'unreachable', error: this.error ?? 'not connected' }
        : await connection.callTool(tool, input, effectKey, signal);
      if (outcome.kind === 'unreachable' && connection === this.connection) this.lost(outcome.error);
      this.deps.onCall?.(this.name, outcome.kind === 'answered' && outcome.isError ? 'error' : outcome.kind, (performance.now() - started) / 1000);
      return outcome;
    } finally {
      release();
    }
  }

  /** Remove its tools and close its connection; it is not tried again. */
  async close(): Promise<void> {
    this.closed = true;
    this.active = false;
    if (this.retry !== undefined) clearTimeout(this.retry);
    this.uninstall();
    await this.work.catch(() => undefined);
    const connection = this.connection;
    this.connection = undefined;
    await connection?.close();
  }

  private async reach(): Promise<void> {
    if (this.closed) return;
    if (this.config.transport === 'stdio' && !this.deps.commands) {
      // Stored by an instance that allows commands, or before they were turned off: not started here.
      this.state = 'unreachable';
      this.error = 'stdio tool servers are off on this instance (AGENTFOREST_TOOL_SERVER_COMMANDS=on allows them)';
      return;
    }
    if (this.config.transport === 'stdio' && this.config.tenantId !== undefined) {
      // Never registered so (refused at registration): a stored one is not started either.
      this.state = 'unreachable';
      this.error = "a tenant's tool server is never started as a command";
      return;
    }
    if (this.retry !== undefined) clearTimeout(this.retry);
    this.retry = undefined;
    const old = this.connection;
    this.connection = undefined;
    await old?.close();
    try {
      const connection = await McpConnection.open(this.endpoint(), { timeoutMs: this.timeoutMs, onToolsChanged: () => void this.relist() });
      if (this.closed) {
        await connection.close();
        return;
      }
      this.connection = connection;
      this.listed = await connection.listTools();
      if (this.active) this.install(this.listed);
      this.state = 'ready';
      this.error = undefined;
      this.retryMs = RETRY_FIRST_MS;
    } catch (error) {
      this.lost(error instanceof Error ? error.message : String(error));
    }
  }

  /** The server said its tools changed: list them again (tools already installed stay until then). */
  private relist(): Promise<void> {
    this.work = this.work.then(async () => {
      const connection = this.connection;
      if (connection === undefined || this.closed) return;
      try {
        this.listed = await connection.listTools();
        if (this.active) this.install(this.listed);
      } catch (error) {
        this.lost(error instanceof Error ? error.message : String(error));
      }
    });
    return this.work;
  }

  /** It could not be reached: say why, and try again later (its tools stay, their calls answer unreachable). */
  private lost(reason: string): void {
    this.state = 'unreachable';
    this.error = reason;
    if (this.closed || this.retry !== undefined) return;
    this.deps.logger.warn({ toolServer: this.name, err: reason, retryMs: this.retryMs }, 'MCP tool server unreachable; trying again');
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.connect();
    }, this.retryMs);
    this.retry.unref();
    this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2);
  }

  private install(tools: readonly McpTool[]): void {
    this.uninstall();
    // One Ajv per listing: its compiled schemas go when the listing is replaced.
    const ajv = new Ajv({ strict: false, allErrors: false, coerceTypes: false });
    for (const tool of this.allowed(tools)) {
      let validate: ValidateFunction | undefined;
      try {
        validate = ajv.compile(tool.inputSchema);
      } catch (error) {
        this.deps.logger.warn({ toolServer: this.name, tool: tool.name, err: error }, 'an MCP tool input schema does not compile; its inputs are passed unchecked');
      }
      this.removals.push(this.deps.register(mcpServiceTool(this, tool, validate, this.config.retryAfterCrash === false ? 'unknown' : 'rerun')));
    }
  }

  private uninstall(): void {
    for (const remove of this.removals.splice(0)) remove();
  }

  private allowed(tools: readonly McpTool[] = this.listed): readonly McpTool[] {
    const allow = this.config.tools;
    return allow === undefined ? tools : tools.filter((t) => allow.includes(t.name));
  }

  private endpoint(): ToolServerEndpoint {
    const { config } = this;
    if (config.transport === 'stdio') {
      return { transport: 'stdio', command: config.command ?? '', args: config.args ?? [], env: this.resolve(config.env) };
    }
    const gate = config.tenantId === undefined ? undefined : () => this.checkSecrets();
    return { transport: 'http', url: config.url ?? '', headers: this.resolve(config.headers), addressGuard: this.deps.addressGuard, gate };
  }

  /** Throws, saying which, when a secret its headers name is no longer lent to its tenant. */
  private checkSecrets(): void {
    const refused = unlentSecret(this.config, this.deps.policy);
    if (refused !== undefined) throw new Error(refused);
  }

  private resolve(values: Record<string, SecretValue> | undefined): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [key, value] of Object.entries(values ?? {})) out[key] = typeof value === 'string' ? value : (this.deps.policy.env[value.env] ?? '');
    return out;
  }
}
