/**
 * The approval rules as the step protocol applies them to one call: which calls are ruled on
 * (a tool the service knows), whether a call waits for a person, and the refusal of a result
 * for a call a person has yet to decide.
 */
import type { Approval, RuleDecision } from '../domain/approvals.js';
import { ServiceError } from '../domain/errors.js';
import { SERVICE_TOOL_NAMES } from '../domain/grants.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { ToolRegistry } from '../tools/tool-registry.js';

export interface CallRulesDeps {
  tools: Pick<ToolRegistry, 'find' | 'withheld'>;
  /** What the rules say of a call of `tool` in forest `rootId` of tenant `tenantId` (undefined: an admin's forest). */
  rule: (tool: string, rootId: string, tenantId: string | undefined) => RuleDecision;
}

export class CallRules {
  constructor(private readonly deps: CallRulesDeps) {}

  /**
   * What the rules say of a call of `name` by `agent`: only a tool the service knows is ruled
   * on (in the agent's scope now, or a service-owned one it is granted that an earlier call of
   * the same output may bring into scope); a name it does not know is the backend's own, and so
   * is another tenant's tool. The rules that apply are the global ones and the agent's tenant's.
   */
  ruleFor(agent: LiveAgent, name: string): RuleDecision {
    const known = this.deps.tools.find(agent, name) !== undefined || (SERVICE_TOOL_NAMES.has(name) && !this.deps.tools.withheld(agent, name));
    return known ? this.deps.rule(name, agent.rootId, agent.header.tenantId) : 'allow';
  }
}

/** A call a person has yet to decide has no result but the one the decision gives it. */
export function refuseWhilePending(pending: Approval | undefined, stepId: string): void {
  if (pending === undefined) return;
  throw new ServiceError('STEP_CONFLICT', `step "${stepId}" call "${pending.toolCallId}" waits for a person's decision (approval ${pending.id}); it gets its result from the decision`);
}
