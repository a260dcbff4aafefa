/**
 * The registered MCP tool servers: `PUT/GET/DELETE /v1/tool-servers/{name}`. A registration is
 * checked (stdio only where the deployment allows commands; a secret only named by an
 * environment variable the model-key rule lends to that URL), reached and listed, then stored
 * as an operator setting, durable before it is answered; its tools then appear for every agent
 * granted them, and a server removed takes its tools from resident agents at once.
 *
 * With several instances the settings are the cluster's: each instance follows them (`sync`,
 * on a notification and on a timer), reaching what was added or changed and dropping what
 * went, so the same servers serve every forest.
 *
 * A server registered with a tenant's key is that tenant's (setting-owners.ts): listed to it
 * and to admins, its tools lent to its agents only; its URL must resolve to public addresses
 * only, at registration and at every connection; its secrets go only while they are its
 * tenant's (checked before every request, tool-server.ts); and it is never a command. Who may
 * put or remove a name is checked again in the span that queues the change (with several
 * instances, within the bound setting-owners.ts states).
 */
import type { Logger } from 'pino';
import type { ToolServerBody, ToolServerView } from '../../contract/index.js';
import { ServiceError } from '../../domain/errors.js';
import type { Clock } from '../../domain/ports.js';
import type { ToolServerConfig } from '../../domain/tool-servers.js';
import type { ModelPolicy } from '../../driver/model-policy.js';
import type { SessionLog } from '../../sessions/session-log.js';
import type { SettingReads } from '../../sessions/settings.js';
import type { ServiceTool } from '../tool-registry.js';
import type { McpCallOutcome } from './mcp-connection.js';
import { SettingsFollow } from '../settings-follow.js';
import { mayChange, ownerAfterPut, ownership, seesSetting } from '../setting-owners.js';
import { checkPublicUrl } from './public-address.js';
import { ToolServer } from './tool-server.js';
import { checkToolServer } from './tool-server-config.js';

export interface ToolServersDeps {
  log: Pick<SessionLog, 'changeSettings' | 'durable'>;
  settings: SettingReads;
  register: (tool: ServiceTool) => () => void;
  /** Which variables may be lent as secrets, to which URLs; and the environment they are read from. */
  policy: ModelPolicy;
  /** stdio servers (a command this service runs) are allowed (AGENTFOREST_TOOL_SERVER_COMMANDS=on). */
  commands: boolean;
  /** Calls to one server at once (AGENTFOREST_TOOL_SERVER_CONCURRENCY). */
  concurrency: number;
  /** A tenant's server may be at a loopback, private or link-local address (tests only; default false): still reached through the guard's path. */
  tenantPrivateAddresses?: boolean;
  clock: Clock;
  logger: Logger;
  onCall?: (server: string, outcome: McpCallOutcome['kind'] | 'error', seconds: number) => void;
}

export const DEFAULT_TOOL_SERVER_CONCURRENCY = 8;
/** With several instances, how often each reads the stored servers: a change holds everywhere within it. */
export const TOOL_SERVER_FOLLOW_MS = 2_000;

export class ToolServers {
  private readonly servers = new Map<string, ToolServer>();
  /** Changes and syncs run one at a time, so the map follows the settings in order. */
  private readonly follow = new SettingsFollow(() => this.sync());
  private stopped = false;

  constructor(private readonly deps: ToolServersDeps) {}

  /**
   * Reach the stored servers; with `followMs` (several instances), follow the stored ones from
   * then on at that period, so a change made on another instance holds here within it.
   */
  start(followMs?: number): Promise<void> {
    return this.follow.start(followMs);
  }

  /** The servers `tenantId` sees (its own and the global ones; undefined, an admin: all), by name. */
  list(tenantId: string | undefined): ToolServerView[] {
    return [...this.servers.values()].filter((s) => seesSetting(tenantId, s.tenantId)).sort((a, b) => (a.name < b.name ? -1 : 1)).map((s) => s.view());
  }

  /** Who registered it: `{}` for a global server, `{owner}` for a tenant's, undefined when none is registered so. */
  ownerOf(name: string): { owner?: string } | undefined {
    const server = this.servers.get(name);
    return server === undefined ? undefined : ownership(server.tenantId);
  }

  get(name: string): ToolServerView {
    return this.require(name).view();
  }

  /** Calls waiting for a slot of the server (0 for one not registered). */
  queued(name: string): number {
    return this.servers.get(name)?.queued ?? 0;
  }

  /**
   * Register or replace a server for `tenantId` (undefined: an admin): checked, reached and
   * listed, stored; answers its view. An admin's put over a tenant's server keeps it that
   * tenant's, held to a tenant's rules (setting-owners.ts).
   */
  async put(name: string, body: ToolServerBody, tenantId?: string): Promise<ToolServerView> {
    for (;;) {
      const owner = ownerAfterPut(name, tenantId, this.ownerOf(name), () => toolServerNotFound(name));
      const config = checkToolServer(body, this.deps, owner);
      if (owner !== undefined && config.url !== undefined && this.deps.tenantPrivateAddresses !== true) await checkPublicUrl(config.url);
      // Reached outside the queue: a slow server holds up no other change.
      const server = this.make(name, config, this.deps.clock.iso());
      await server.connect();
      const view = await this.follow.serially(async () => {
        let now: string | undefined;
        try {
          // In the span that queues the write: the name may have been taken, or changed hands, meanwhile.
          now = ownerAfterPut(name, tenantId, this.ownerOf(name), () => toolServerNotFound(name));
          if (now === owner) {
            this.deps.log.changeSettings({ op: 'put', setting: { kind: 'tool-server', name, value: config, updatedAt: server.updatedAt } });
            await this.deps.log.durable();
          }
        } catch (error) {
          await server.close();
          throw error;
        }
        // An admin's put over a name that changed hands meanwhile: made again, as its owner's now.
        if (now !== owner) {
          await server.close();
          return undefined;
        }
        // Durable: the server it replaces goes, and its tools take their place.
        await this.servers.get(name)?.close();
        this.servers.set(name, server);
        server.activate();
        return server.view();
      });
      if (view !== undefined) return view;
    }
  }

  /** Remove a server (`tenantId`: the caller's tenant, undefined for an admin): its tools leave every agent at once; durable before it resolves. */
  delete(name: string, tenantId?: string): Promise<void> {
    this.require(name);
    return this.follow.serially(async () => {
      const server = this.require(name);
      mayChange(name, tenantId, ownership(server.tenantId), () => toolServerNotFound(name));
      this.deps.log.changeSettings({ op: 'delete', kind: 'tool-server', name });
      await server.close();
      this.servers.delete(name);
      await this.deps.log.durable();
    });
  }

  /** Follow the stored servers: reach the new and changed ones, drop the ones gone. Never throws. */
  sync(): Promise<void> {
    return this.follow.serially(async () => {
      if (this.stopped) return;
      const stored = await this.deps.settings.list('tool-server');
      const wanted = new Set(stored.map((s) => s.name));
      for (const [name, server] of this.servers) {
        if (wanted.has(name)) continue;
        await server.close();
        this.servers.delete(name);
      }
      await Promise.all(
        stored.map(async (setting) => {
          const current = this.servers.get(setting.name);
          if (current?.updatedAt === setting.updatedAt) return;
          const server = this.make(setting.name, setting.value as ToolServerConfig, setting.updatedAt);
          await server.connect();
          await current?.close();
          this.servers.set(setting.name, server);
          server.activate();
        }),
      );
    }).catch((error: unknown) => this.deps.logger.error({ err: error }, 'could not follow the stored tool servers'));
  }

  /** Another instance changed the stored settings: follow them now rather than at the next period. */
  resync(): void {
    this.follow.again();
  }

  /** Close every connection (at shutdown); the servers stay registered. */
  stop(): Promise<void> {
    this.stopped = true;
    this.follow.stop();
    return this.follow.serially(async () => {
      await Promise.all([...this.servers.values()].map((s) => s.close()));
      this.servers.clear();
    });
  }

  private make(name: string, config: ToolServerConfig, updatedAt: string): ToolServer {
    const { register, policy, concurrency, commands, logger, onCall } = this.deps;
    const addressGuard = config.tenantId === undefined ? undefined : { allowPrivate: this.deps.tenantPrivateAddresses === true };
    return new ToolServer(name, config, updatedAt, { register, policy, concurrency, commands, addressGuard, logger, ...(onCall === undefined ? {} : { onCall }) });
  }

  private require(name: string): ToolServer {
    const server = this.servers.get(name);
    if (server === undefined) throw toolServerNotFound(name);
    return server;
  }
}

/** The answer to a name that does not exist (the same for one another tenant holds). */
export function toolServerNotFound(name: string): ServiceError {
  return new ServiceError('TOOL_SERVER_NOT_FOUND', `no tool server is registered as "${name}"`);
}
