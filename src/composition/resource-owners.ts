/**
 * Who owns each kind of resource a route names, for the tenant check (routes/tenant-access.ts):
 * an agent its root's tenant (the header says), a message its session's agent's, an approval
 * its agent's; webhook subscriptions and named settings their maker's.
 */
import type { ResourceOwners } from '../routes/tenant-access.js';
import type { System } from './system-parts.js';

export function resourceOwners(system: Pick<System, 'registry' | 'log' | 'approvals' | 'webhooks' | 'toolServers' | 'backendTools' | 'approvalRules'>): ResourceOwners {
  const agent = async (id: string): Promise<{ owner?: string } | undefined> => {
    const header = system.registry.get(id)?.header ?? (await system.log.summary(id))?.header;
    if (header === undefined) return undefined;
    return header.tenantId === undefined ? {} : { owner: header.tenantId };
  };
  return {
    agent,
    message: async (id) => {
      await system.log.settled();
      const location = await system.log.store.locate(id);
      return location === undefined ? undefined : agent(location.sessionId);
    },
    approval: async (id) => {
      const agentId = await system.approvals.agentOf(id);
      return agentId === undefined ? undefined : agent(agentId);
    },
    webhook: (id) => system.webhooks.subscriptions.ownerOf(id),
    toolServer: (name) => system.toolServers.ownerOf(name),
    backendTool: (name) => system.backendTools.ownerOf(name),
    approvalRule: (id) => system.approvalRules.ownerOf(id),
  };
}
