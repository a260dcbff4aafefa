/**
 * The shapes the children's lifecycle is built from and speaks in: its collaborators
 * (`ContinuationDeps`), what a parent asks for when it starts a child (`ChildSpec`), what a
 * delivery to a child answers (`ChildDelivery`), and what it tells its observers. Its parts
 * (report-rule.ts, child-lifecycle.ts, closing.ts; built by continuation.ts) share them.
 */
import type { Logger } from 'pino';
import type { ChildMode, Provider } from '../domain/agent.js';
import type { Budget } from '../domain/budget.js';
import type { TextBlock } from '../domain/message.js';
import type { ModelSpec } from '../domain/model.js';
import type { Clock, IdSource } from '../domain/ports.js';
import type { SessionHeader } from '../domain/session.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { AgentScope, LiveAgent } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { ActivationSetupRegistry } from './setup-registry.js';
import type { RuntimeObserver } from '../observation/runtime-observer.js';

/** What the children's lifecycle tells its observers about: reports, cold resumes, settlements. */
export type ContinuationObserver = Required<Pick<RuntimeObserver, 'report' | 'coldResumed' | 'settled'>>;

export interface ContinuationDeps {
  registry: AgentRegistry;
  log: SessionLog;
  clock: Clock;
  ids: IdSource;
  logger: Logger;
  setup: ActivationSetupRegistry<AgentScope>;
  /** Builds a LiveAgent wired to the dispatcher and to the lifecycle's hooks (unpublished). */
  makeAgent: (header: SessionHeader, scope: AgentScope, activationId: string) => LiveAgent;
  isDraining: () => boolean;
  observer: ContinuationObserver;
  /** The deepest a child may be (a root is depth 0). */
  maxDepth?: number;
  /** Grants to children (budgets.ts). */
  budgets: BudgetPort;
  /** The tools a child is granted (tools/grants.ts). */
  grants: GrantPort;
  /** The tenants' count quotas (tenants/quotas.ts): QUOTA_EXCEEDED when one more live agent would pass one. */
  quotas?: { admitLive(tenantId: string | undefined, root: boolean): void };
  /**
   * Wakeup reports join a parent's queued wakeup turn (the inbox tail) instead of queueing a
   * turn each. Off by default: the HTTP contract gives each wakeup report its own later turn.
   */
  coalesceWakeups?: boolean;
}

/** What the child lifecycle needs of budgets (budgets/budgets.ts). */
export interface BudgetPort {
  /** Throws VALIDATION when the grant promises more than the budgets above `parentId` have left. */
  checkGrant(parentId: string, grant: Budget): void;
}

/** What the child lifecycle needs of tool grants (tools/grants.ts). */
export interface GrantPort {
  /**
   * The grants of a new child of `parentId`: `wanted` when given (400 VALIDATION names one its
   * parent's chain does not cover), else a copy of the parent's.
   */
  forChild(parentId: string, wanted: readonly string[] | undefined): string[];
}

export interface ChildSpec {
  mode: ChildMode;
  provider: Provider;
  prompt: string | TextBlock[];
  label?: string;
  instructions?: string;
  toolFilter?: { allow: string[] };
  /** The tools it asks to be granted (absent: its parent's). */
  tools?: string[];
  /** The child's own model; absent: an in-process child inherits its parent's (if any). */
  model?: ModelSpec;
  /** A grant: limits of its own, out of what the budgets above it have left. */
  budget?: Budget;
}

export interface ChildDelivery {
  messageId: string;
  inboxItemId?: string;
  resumed?: { agentToken: string };
}

/** Which wording an authority failure uses: the HTTP route's, or send_message's. */
export type DeliveryPath = 'http' | 'tool';
