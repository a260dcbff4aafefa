/**
 * The registries of operator settings the runtime reads but never steers: MCP tool servers,
 * declared backend tools and tenants. Each follows the stored settings (started and stopped by
 * the start, src/start.ts).
 */
import type { Logger } from 'pino';
import type { Clock } from '../domain/ports.js';
import type { ModelPolicy } from '../driver/model-policy.js';
import type { Metrics } from '../observation/metrics.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { SettingReads } from '../sessions/settings.js';
import { Tenants } from '../tenants/tenants.js';
import { BackendTools } from '../tools/backend/backend-tools.js';
import { DEFAULT_TOOL_SERVER_CONCURRENCY, ToolServers } from '../tools/mcp/tool-servers.js';
import type { ToolRegistry } from '../tools/tool-registry.js';
import type { Topology } from '../topology/topology.js';
import type { SystemOptions } from './system-options.js';

export interface SettingsRegistriesDeps {
  log: SessionLog;
  settings: SettingReads;
  tools: ToolRegistry;
  policy: ModelPolicy;
  metrics: Metrics;
  topology: Pick<Topology, 'list'>;
  /** Whether a tenant has agents live, or roots being made, on this instance (tenants/quotas.ts). */
  hasLiveHere: (tenantId: string) => boolean;
  /** A tenant's quotas or model keys changed, here or on another instance. */
  onTenantChange: (tenantId: string) => void;
  clock: Clock;
  logger: Logger;
}

export function settingsRegistries(deps: SettingsRegistriesDeps, options: SystemOptions['toolServers']): { toolServers: ToolServers; backendTools: BackendTools; tenants: Tenants } {
  const { log, settings, tools, clock, logger } = deps;
  const backendTools = new BackendTools({ log, settings, register: (tool) => tools.register(tool), clock, logger });
  const toolServers = new ToolServers({
    log,
    settings,
    register: (tool) => tools.register(tool),
    policy: deps.policy,
    commands: options?.commands ?? false,
    concurrency: options?.concurrency ?? DEFAULT_TOOL_SERVER_CONCURRENCY,
    tenantPrivateAddresses: options?.tenantPrivateAddresses ?? false,
    clock,
    logger,
    onCall: (server, outcome, seconds) => deps.metrics.toolServerCall(server, outcome, seconds),
  });
  const tenants = new Tenants({
    log,
    settings,
    clock,
    logger,
    // The cluster's live list, asked of every instance with the caller's key.
    hasLiveAgents: async (tenantId, caller) => (await deps.topology.list({ limit: 1, tenantId }, caller)).items.length > 0,
    hasLiveHere: deps.hasLiveHere,
    onChange: deps.onTenantChange,
  });
  return { toolServers, backendTools, tenants };
}
