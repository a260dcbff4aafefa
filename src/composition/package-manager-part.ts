/**
 * The package manager as the composition builds it: the tools and children it installs into,
 * the control a package's tools reach (list, interrupt), and the options the deployment chose.
 */
import type { Limits } from '../agents/limits.js';
import type { AgentQueries } from '../agents/reads/agent-queries.js';
import type { AgentScope } from '../agents/live-agent.js';
import type { Continuation } from '../children/continuation.js';
import type { Interrupts } from '../children/interrupts.js';
import type { ActivationSetupRegistry } from '../children/setup-registry.js';
import { PackageManager } from '../tools/packages/package-manager.js';
import type { ToolRegistry } from '../tools/tool-registry.js';
import type { SystemOptions } from './system-options.js';

export interface PackagePartDeps {
  tools: ToolRegistry;
  setup: ActivationSetupRegistry<AgentScope>;
  continuation: Continuation;
  queries: AgentQueries;
  interrupts: Interrupts;
}

export function packageManager(deps: PackagePartDeps, options: SystemOptions, limits: Limits): PackageManager {
  const { continuation } = deps;
  return new PackageManager(
    {
      tools: deps.tools,
      setup: deps.setup,
      children: continuation.children,
      reports: continuation.reports,
      control: {
        hasContinuableChildren: (agent) => continuation.activations.isParentOfContinuable(agent.id),
        listChildren: (agent, scope) => deps.queries.listChildren(agent, scope),
        interrupt: (caller, targetId) => deps.interrupts.fromAncestor(caller, targetId),
      },
    },
    {
      packages: options.packages,
      reportDelivery: options.reportDelivery ?? 'quiet',
      settlementNotices: options.settlementNotices ?? 'off',
      maxReportBytes: limits.reportBytes,
      modelGrants: options.spawnBudgets ?? false,
    },
  );
}
