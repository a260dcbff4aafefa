/**
 * `PUT /v1/agents/{id}/grants` and `GET …/grants`: the operator sets an agent's grants, and
 * reads them with the tools they come to. A change is a grants entry in the agent's session
 * (budgets/account-writes.ts: live or stored, in the span of its check, as a budget change).
 *
 * A root may be granted anything; a child only what its parent's chain holds (the operator may
 * widen a child up to that, never beyond). Taking a grant from an agent takes it from every
 * descendant at once: a tool is allowed only where the whole chain allows it (grants.ts).
 */
import type { GrantsView } from '../contract/index.js';
import { ServiceError } from '../domain/errors.js';
import type { Clock } from '../domain/ports.js';
import type { SessionHeader } from '../domain/session.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { Budgets } from '../budgets/budgets.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { AccountWrites } from '../budgets/account-writes.js';
import type { ToolGrants } from './grants.js';
import type { ToolRegistry } from './tool-registry.js';

export interface GrantChangesDeps {
  grants: ToolGrants;
  tools: Pick<ToolRegistry, 'listFor' | 'known'>;
  /** The forests' accounts, which hold every agent's grants. */
  budgets: Pick<Budgets, 'withForest'>;
  registry: AgentRegistry;
  log: SessionLog;
  clock: Clock;
  writes: AccountWrites;
}

export class GrantChanges {
  constructor(private readonly deps: GrantChangesDeps) {}

  /** Set an agent's grants (all of them); answers its view once durable. */
  change(id: string, wanted: readonly string[]): Promise<GrantsView> {
    const { clock, grants } = this.deps;
    return this.deps.writes.write(id, {
      what: 'grants',
      entry: () => ({ type: 'grants', at: clock.iso(), grants: grants.forOperator(id, wanted) }),
      view: (header) => this.viewOf(id, header),
    });
  }

  /** An agent's grants and the tools they come to now. */
  async view(id: string): Promise<GrantsView> {
    const live = this.deps.registry.get(id);
    if (live !== undefined) return this.viewOf(id, live.header);
    const header = await this.header(id);
    return this.deps.budgets.withForest(header.rootSession ?? id, () => this.viewOf(id, header));
  }

  /**
   * A live agent's effective tools are exactly what its steps list; one that is not live is
   * shown what its grants and toolFilter allow of the known tools (its scope is made when it runs).
   */
  private viewOf(id: string, header: SessionHeader): GrantsView {
    const grants = [...(this.deps.grants.own(id) ?? [])];
    const live = this.deps.registry.get(id);
    if (live !== undefined) return { grants, effective: this.deps.tools.listFor(live).map((tool) => tool.name) };
    const allow = header.toolFilter?.allow;
    const effective = this.deps.tools.known(header.tenantId).filter((name) => this.deps.grants.allows(id, name) && (allow === undefined || allow.includes(name)));
    return { grants, effective };
  }

  private async header(id: string): Promise<SessionHeader> {
    const header = (await this.deps.log.summary(id))?.header;
    if (header === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    return header;
  }
}
