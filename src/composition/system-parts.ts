/**
 * What a System holds: the objects the composition (system.ts) builds and wires, as the app,
 * the start and the tests reach them.
 */
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { AdmissionGate } from '../agents/admission-gate.js';
import type { AgentQueries } from '../agents/reads/agent-queries.js';
import type { NotRunningRoots } from '../agents/reads/not-running-roots.js';
import type { AgentAuthority } from '../agents/authority.js';
import type { AgentDeliveries } from '../agents/deliveries.js';
import type { RootLifecycle } from '../agents/root-lifecycle.js';
import type { BudgetChanges } from '../budgets/budget-changes.js';
import type { GrantChanges } from '../tools/grant-changes.js';
import type { ToolServers } from '../tools/mcp/tool-servers.js';
import type { BackendTools } from '../tools/backend/backend-tools.js';
import type { ToolPool } from '../tools/backend/tool-pool.js';
import type { Budgets } from '../budgets/budgets.js';
import type { EventHub } from '../observation/event-hub.js';
import type { EventStreams } from '../observation/event-stream.js';
import type { Metrics } from '../observation/metrics.js';
import type { Observers } from '../observation/runtime-observer.js';
import type { IdempotencyKeys } from '../sessions/idempotency.js';
import type { ModelDriver } from '../driver/model-driver.js';
import type { Continuation } from '../children/continuation.js';
import type { ActivationSetupRegistry } from '../children/setup-registry.js';
import type { SettlementNotices } from '../children/settlement-notices.js';
import type { AgentScope, LiveAgent, StepClaim } from '../agents/live-agent.js';
import type { PackageManager } from '../tools/packages/package-manager.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { SessionStore } from '../sessions/session-store.js';
import type { StepDispatcher } from '../steps/step-dispatcher.js';
import type { Compactions } from '../steps/compactions.js';
import type { Interrupts } from '../children/interrupts.js';
import type { StepProtocol } from '../steps/step-protocol.js';
import type { ToolCalls } from '../tools/tool-calls.js';
import type { Topology } from '../topology/topology.js';
import type { ToolRegistry } from '../tools/tool-registry.js';
import type { Tracing } from '../observation/tracing/tracing.js';
import type { Webhooks } from '../observation/webhooks/webhooks.js';
import type { ApprovalRules } from '../approvals/approval-rules.js';
import type { Approvals } from '../approvals/approvals.js';
import type { Tenants } from '../tenants/tenants.js';
import type { TenantQuotas } from '../tenants/quotas.js';
import type { QuotaSharing } from '../tenants/quota-sharing.js';
import type { ProviderGate } from '../driver/provider-gate.js';
import type { ProviderSharing } from '../driver/provider-sharing.js';

export interface System {
  store: SessionStore;
  log: SessionLog;
  registry: AgentRegistry;
  dispatcher: StepDispatcher<LiveAgent, StepClaim>;
  tools: ToolRegistry;
  setup: ActivationSetupRegistry<AgentScope>;
  /** Continuable children and the report rule, part by part (children/continuation.ts). */
  continuation: Continuation;
  /** Roots: create, resume, dispose; the stop of every live agent. */
  roots: RootLifecycle;
  /** Messages and children delivered over HTTP. */
  deliveries: AgentDeliveries;
  /** The roots that are not live here (the ones to resume). */
  notRunning: NotRunningRoots;
  /** Tokens of live incarnations. */
  authority: AgentAuthority;
  /** The operator's and the tools' interrupts. */
  interrupts: Interrupts;
  /** Claiming steps, recording outputs and tool results. */
  protocol: StepProtocol;
  /** Service-owned tool calls outside a step's output (`POST /v1/agents/{id}/tool-calls`). */
  toolCalls: ToolCalls;
  /** Compaction entries. */
  compactions: Compactions;
  packages: PackageManager;
  /** One instance, or several on one database (started before serving, stopped at close). */
  topology: Topology;
  idempotency: IdempotencyKeys;
  hub: EventHub;
  streams: EventStreams;
  metrics: Metrics;
  driver: ModelDriver;
  /** Whether new work is admitted (draining). */
  gate: AdmissionGate;
  /** Views, lists and session pages (what `agents` answers reads with). */
  queries: AgentQueries;
  /** Tree budgets: the claim gate, usage figures, grants. */
  budgets: Budgets;
  /** Tells a parent that a continuable child's turn ended (when the package's mode says so). */
  notices: SettlementNotices;
  /** What the runtime tells everything that only watches it (the observer list). */
  observers: Observers;
  /** Spans of turns, steps and tool calls (NO_TRACING unless traces are exported). */
  tracing: Tracing;
  /** The operator's budget changes. */
  budgetChanges: BudgetChanges;
  grantChanges: GrantChanges;
  toolServers: ToolServers;
  backendTools: BackendTools;
  approvals: Approvals;
  approvalRules: ApprovalRules;
  /** Tenants and their keys (started before serving, stopped at close). */
  tenants: Tenants;
  /** The tenants' quotas in force: the count checks and the claim gate beside the budgets. */
  quotas: TenantQuotas<LiveAgent>;
  /** The quotas' figures to and from the store (started before serving, stopped at close). */
  quotaSharing: QuotaSharing;
  /** What holds a model provider: its back-off, its full window of AGENTFOREST_MODEL_LIMITS. */
  providers: ProviderGate;
  /** The providers' back-offs and counts to and from the store (started before serving, stopped at close). */
  providerSharing: ProviderSharing;
  pool: ToolPool;
  /** Webhook subscriptions, the outbox's events and their delivery (started before serving, stopped at close). */
  webhooks: Webhooks;
}
