/**
 * The tenants' quotas as the composition builds them: the quotas in force (a claim gate beside
 * the budgets, whose held agents go back to the dispatcher) and the sharing of their figures
 * through the store.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { LiveAgent, StepClaim } from '../agents/live-agent.js';
import type { Clock } from '../domain/ports.js';
import type { Quotas } from '../domain/tenants.js';
import { isClaimable } from '../domain/turn-machine.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { SessionStore } from '../sessions/session-store.js';
import type { StepDispatcher } from '../steps/step-dispatcher.js';
import { QuotaSharing } from '../tenants/quota-sharing.js';
import { TenantQuotas } from '../tenants/quotas.js';

/** This process in the usage rows when it is the only instance (several use their instance ids). */
export const PROCESS_ID = `process-${randomUUID()}`;

export interface QuotaPartsDeps {
  clock: Clock;
  logger: Logger;
  log: SessionLog;
  store: Pick<SessionStore, 'tenantUsage'>;
  registry: AgentRegistry;
  /** Several instances: this one's id (read once they run). */
  instanceId: () => string | undefined;
  shared: boolean;
  /** Whether any tenant is defined (nothing to share otherwise). */
  active: () => boolean;
  quotasOf: (tenantId: string) => Quotas | undefined;
  /** Built after the quotas (whose gate it takes): called only once construction is over. */
  dispatcher: () => StepDispatcher<LiveAgent, StepClaim>;
}

export function quotaParts(deps: QuotaPartsDeps): { quotas: TenantQuotas<LiveAgent>; quotaSharing: QuotaSharing } {
  const quotas = new TenantQuotas<LiveAgent>({
    clock: deps.clock,
    quotasOf: deps.quotasOf,
    tenantOf: (sessionId) => deps.registry.get(sessionId)?.header.tenantId,
    onPaused: (agent) => deps.dispatcher().hold(agent),
    onResumed: (agent) => {
      if (!agent.disposing && isClaimable(agent.state)) deps.dispatcher().offer(agent);
    },
  });
  const quotaSharing = new QuotaSharing(quotas, {
    log: deps.log,
    reads: deps.store.tenantUsage,
    clock: deps.clock,
    logger: deps.logger,
    instanceId: () => deps.instanceId() ?? PROCESS_ID,
    shared: deps.shared,
    active: deps.active,
  });
  return { quotas, quotaSharing };
}
