/**
 * The step service: the one entry point the routes and the built-in model driver call for
 * steps and tool calls. It holds no rule of its own; it builds and routes to
 *
 * - steps/step-protocol.ts: claiming steps, recording outputs and tool results;
 * - src/tools/tool-calls.ts: running service-owned tools, `POST /v1/agents/{id}/tool-calls`;
 * - steps/redaction.ts (used by both): no token is ever logged or stored;
 * - steps/step-cache.ts: each step's messages, rendered from what is new since the last one;
 * - steps/compactions.ts (built by the system, which wires its lock): compaction entries.
 *
 * Every tool call that ran and its result are written to the caller's session; a call outside a
 * step whose failure refuses the request writes nothing (see ToolCalls.callTool).
 */
import type { Logger } from 'pino';
import type { ToolSchema } from '../domain/step-render.js';
import type { TokenUsage } from '../domain/model.js';
import type { AdmissionGate } from '../agents/admission-gate.js';
import type { Budgets } from '../budgets/budgets.js';
import type { AgentAuthority } from '../agents/authority.js';
import type { IdempotencyKeys } from '../sessions/idempotency.js';
import type { WaiterGate } from '../agents/limits.js';
import type { LiveAgent, StepClaim } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { LeaseView } from './step-lease.js';
import type { StepDispatcher } from './step-dispatcher.js';
import type { ModelOutput, OutputResult, PostedOutput, Step, ToolCallBody, ToolResultInput } from '../contract/index.js';
import { stepObject, type RenderedStep } from './rendered-step.js';
import type { StepCache } from './step-cache.js';
import type { CompactionInput, Compactions } from './compactions.js';
import type { InterruptedSteps } from './interrupted-steps.js';
import type { CompactionEntry } from '../domain/session.js';
import { StepProtocol } from './step-protocol.js';
import { ToolCalls, type CallOptions, type CallResult } from '../tools/tool-calls.js';
import type { ToolRegistry } from '../tools/tool-registry.js';
import type { Tracing } from '../observation/tracing/tracing.js';

export type { CallOptions, CallResult } from '../tools/tool-calls.js';

export interface StepServiceDeps {
  authority: AgentAuthority;
  gate: AdmissionGate;
  dispatcher: StepDispatcher<LiveAgent, StepClaim>;
  tools: ToolRegistry;
  log: SessionLog;
  logger: Logger;
  idempotency: IdempotencyKeys;
  cache: StepCache;
  compactions: Compactions;
  /** Bounds the concurrent long-polls per agent. */
  waiters?: WaiterGate;
  /** A direct claim is refused while a budget stops the agent. */
  budgets: Pick<Budgets, 'checkClaim'>;
  /** Gives an output's usage its cost (domain/pricing.ts). */
  price: (usage: TokenUsage, model: string | undefined) => TokenUsage;
  /** Spans of tool calls and steps (NO_TRACING when off). */
  tracing: Tracing;
  /** Steps whose turn was interrupted, for requests made after their incarnation is gone. */
  interrupted: InterruptedSteps;
}

export class StepService {
  private readonly calls: ToolCalls;
  private readonly protocol: StepProtocol;
  private readonly compactions: Compactions;

  constructor(deps: StepServiceDeps) {
    const { authority, gate, dispatcher, tools, log, logger, idempotency, cache, waiters, budgets, price, tracing, interrupted } = deps;
    this.calls = new ToolCalls({ authority, tools, log, logger, idempotency, tracing });
    this.protocol = new StepProtocol({ authority, gate, dispatcher, tools, calls: this.calls, log, cache, waiters, budgets, price, tracing, interrupted });
    this.compactions = deps.compactions;
  }

  /** Steps claimed whose output has not arrived: model requests in flight. */
  stepsInFlight(agents: Iterable<LiveAgent>): number {
    return this.protocol.stepsInFlight(agents);
  }

  toolsFor(id: string, token: string | undefined): Promise<ToolSchema[]> {
    return this.protocol.toolsFor(id, token);
  }

  /** Claim this agent's next step, waiting up to `waitMs`. Null when none (204). `since`: see StepProtocol.claimStep. */
  claimStep(id: string, token: string | undefined, waitMs: number, signal?: AbortSignal, since?: string): Promise<RenderedStep | null> {
    return this.protocol.claimStep(id, token, waitMs, signal, since);
  }

  /** The worker-pool claim: the oldest claimable step of any agent (optionally of one forest). */
  claimAny(waitMs: number, rootId: string | undefined, signal?: AbortSignal, since?: string): Promise<{ agentId: string; agentToken: string; step: RenderedStep } | null> {
    return this.protocol.claimAny(waitMs, rootId, signal, since);
  }

  /** The output in either form; `attempt`: the fence (X-Step-Attempt, absent 1). */
  postOutput(id: string, token: string | undefined, stepId: string, output: PostedOutput, attempt?: number): Promise<OutputResult> {
    return this.protocol.postOutput(id, token, stepId, output, attempt);
  }

  /** Renew the lease the claim `attempt` holds on a step. */
  heartbeat(id: string, token: string | undefined, stepId: string, attempt?: number): Promise<{ lease: LeaseView }> {
    return this.protocol.heartbeat(id, token, stepId, attempt);
  }

  /** Record a step's output and run its service-owned tool calls (see StepProtocol.applyOutput). */
  applyOutput(agent: LiveAgent, stepId: string, output: ModelOutput, attempt: number, refused?: ReadonlyMap<string, string>): Promise<OutputResult> {
    return this.protocol.applyOutput(agent, stepId, output, attempt, refused);
  }

  postToolResults(id: string, token: string | undefined, stepId: string, results: ToolResultInput[], attempt?: number): Promise<{ turn: 'open' | 'ended' }> {
    return this.protocol.postToolResults(id, token, stepId, results, attempt);
  }

  applyToolResults(agent: LiveAgent, stepId: string, results: readonly ToolResultInput[], attempt: number): Promise<{ turn: 'open' | 'ended' }> {
    return this.protocol.applyToolResults(agent, stepId, results, attempt);
  }

  /** Run one service-owned tool as this agent, outside a step's output (see ToolCalls.callTool). */
  callTool(id: string, token: string | undefined, body: ToolCallBody, options?: CallOptions): Promise<CallResult & { replayed: boolean }> {
    return this.calls.callTool(id, token, body, options);
  }

  /** `POST /v1/agents/{id}/compactions` (steps/compactions.ts). */
  compact(id: string, token: string | undefined, input: CompactionInput): Promise<CompactionEntry> {
    return this.compactions.post(id, token, input);
  }

  /** The built-in driver's compaction inside the step it holds. */
  compactHeld(agent: LiveAgent, input: CompactionInput, stepId: string): Promise<CompactionEntry> {
    return this.compactions.compactLive(agent, input, stepId);
  }

  /** A claimed step as a model request (full form): the log up to its step-start, and the agent's tools. */
  async renderStep(claim: StepClaim): Promise<Step> {
    return stepObject(await this.protocol.renderStep(claim));
  }
}
