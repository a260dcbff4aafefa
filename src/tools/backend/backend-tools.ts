/**
 * Declared backend tools: `PUT/GET/DELETE /v1/backend-tools/{name}`. A declaration is an
 * operator setting, durable before it is answered; from then on the tool is in the registry
 * for every agent granted it, listed in its steps under its own name. The service never runs
 * one: a call to it is `awaiting`, as a backend's own call always was, and is also offered to
 * the tool worker pool (tool-pool.ts).
 *
 * With several instances each follows the stored declarations at the tool servers' period.
 *
 * A tool declared with a tenant's key is that tenant's (setting-owners.ts): listed to it and
 * to admins, in the registry for its agents only; who may put or remove a name is checked again
 * in the span that queues the change.
 */
import type { Logger } from 'pino';
import type { BackendToolBody, BackendToolView } from '../../contract/index.js';
import type { BackendToolConfig } from '../../domain/backend-tools.js';
import { ServiceError } from '../../domain/errors.js';
import { SERVICE_TOOL_NAMES } from '../../domain/grants.js';
import { MCP_TOOL_PREFIX } from '../../domain/tool-servers.js';
import type { Clock } from '../../domain/ports.js';
import type { SessionLog } from '../../sessions/session-log.js';
import type { SettingReads } from '../../sessions/settings.js';
import { SettingsFollow } from '../settings-follow.js';
import { mayChange, ownedBy, ownerAfterPut, ownership, seesSetting } from '../setting-owners.js';
import type { ServiceTool } from '../tool-registry.js';

export interface BackendToolsDeps {
  log: Pick<SessionLog, 'changeSettings' | 'durable'>;
  settings: SettingReads;
  register: (tool: ServiceTool) => () => void;
  clock: Clock;
  logger: Logger;
}


interface Declared {
  config: BackendToolConfig;
  updatedAt: string;
  remove: () => void;
}

export class BackendTools {
  private readonly declared = new Map<string, Declared>();
  private readonly follow = new SettingsFollow(() => this.sync());

  constructor(private readonly deps: BackendToolsDeps) {}

  /** Read the stored declarations; with `followMs` (several instances), follow them at that period. */
  start(followMs?: number): Promise<void> {
    return this.follow.start(followMs);
  }

  /** Another instance changed the stored settings: follow them now rather than at the next period. */
  resync(): void {
    this.follow.again();
  }

  stop(): void {
    this.follow.stop();
  }

  /** Who declared it: `{}` for a global tool, `{owner}` for a tenant's, undefined when none is declared so. */
  ownerOf(name: string): { owner?: string } | undefined {
    const declared = this.declared.get(name);
    return declared === undefined ? undefined : ownership(declared.config.tenantId);
  }

  /** The tools `tenantId` sees (its own and the global ones; undefined, an admin: all), by name. */
  list(tenantId: string | undefined): BackendToolView[] {
    return [...this.declared.keys()].sort().filter((name) => seesSetting(tenantId, this.declared.get(name)!.config.tenantId)).map((name) => this.view(name));
  }

  get(name: string): BackendToolView {
    if (!this.declared.has(name)) throw backendToolNotFound(name);
    return this.view(name);
  }

  /**
   * Declare or replace a tool for `tenantId` (undefined: an admin; over a tenant's tool, it
   * stays that tenant's); durable before it resolves.
   */
  put(name: string, body: BackendToolBody, tenantId?: string): Promise<BackendToolView> {
    if (SERVICE_TOOL_NAMES.has(name)) throw new ServiceError('VALIDATION', `"${name}" is the name of a service-owned tool`);
    if (name.startsWith(MCP_TOOL_PREFIX)) throw new ServiceError('VALIDATION', `"${name}" starts with ${MCP_TOOL_PREFIX}, which names the tools of MCP servers`);
    return this.follow.serially(async () => {
      // In the span that queues the write: the name may have been taken since the route's check.
      const owner = ownerAfterPut(name, tenantId, this.ownerOf(name), () => backendToolNotFound(name));
      const config: BackendToolConfig = { description: body.description, parameters: body.parameters, ...ownedBy(owner) };
      const updatedAt = this.deps.clock.iso();
      this.deps.log.changeSettings({ op: 'put', setting: { kind: 'backend-tool', name, value: config, updatedAt } });
      await this.deps.log.durable();
      this.install(name, config, updatedAt);
      return this.view(name);
    });
  }

  /** Remove a declaration (`tenantId`: the caller's, undefined for an admin): the tool leaves every agent at once; durable before it resolves. */
  delete(name: string, tenantId?: string): Promise<void> {
    this.get(name);
    return this.follow.serially(async () => {
      const current = this.ownerOf(name);
      if (current === undefined) throw backendToolNotFound(name);
      mayChange(name, tenantId, current, () => backendToolNotFound(name));
      this.deps.log.changeSettings({ op: 'delete', kind: 'backend-tool', name });
      this.uninstall(name);
      await this.deps.log.durable();
    });
  }

  /** Follow the stored declarations (never throws). */
  sync(): Promise<void> {
    return this.follow.serially(async () => {
      const stored = await this.deps.settings.list('backend-tool');
      const wanted = new Set(stored.map((s) => s.name));
      for (const name of [...this.declared.keys()]) if (!wanted.has(name)) this.uninstall(name);
      for (const setting of stored) {
        if (this.declared.get(setting.name)?.updatedAt !== setting.updatedAt) this.install(setting.name, setting.value as BackendToolConfig, setting.updatedAt);
      }
    }).catch((error: unknown) => this.deps.logger.error({ err: error }, 'could not follow the stored backend tools'));
  }

  private install(name: string, config: BackendToolConfig, updatedAt: string): void {
    this.uninstall(name);
    const remove = this.deps.register(backendTool(name, config));
    this.declared.set(name, { config, updatedAt, remove });
  }

  private uninstall(name: string): void {
    this.declared.get(name)?.remove();
    this.declared.delete(name);
  }

  private view(name: string): BackendToolView {
    const { config } = this.declared.get(name)!;
    return { name, description: config.description, parameters: config.parameters, ...ownedBy(config.tenantId) };
  }
}

/** The answer to a name that does not exist (the same for one another tenant holds). */
export function backendToolNotFound(name: string): ServiceError {
  return new ServiceError('BACKEND_TOOL_NOT_FOUND', `no backend tool is declared as "${name}"`);
}

/** The registry's entry for a declared tool: listed, never run by the service. */
function backendTool(name: string, config: BackendToolConfig): ServiceTool {
  return {
    name,
    description: config.description,
    inputSchema: config.parameters,
    owner: 'backend',
    tenantId: config.tenantId,
    inScope: () => true,
    execute() {
      throw new ServiceError('TOOL_NOT_FOUND', `tool "${name}" is run by the backend: answer its call through the step's tool-results`);
    },
  };
}
