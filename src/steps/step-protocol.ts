/**
 * The step protocol: claiming model requests (per agent or from the worker pool), recording
 * the model's output (running its service-owned tool calls at once), recording the backend's
 * own tool results, and the tools an agent sees.
 *
 * Invariants: a step of an agent the built-in model driver owns is never claimed or answered
 * over HTTP; a claimed step whose caller went away is given back, never lost; a batch of tool
 * results is validated whole before any of it is written; every write is durable before the
 * call resolves.
 */
import type { DeltaPiece, StepDeltas } from '../observation/step-deltas.js';
import type { StepScope } from '../topology/topology.js';
import type { AgentCredential, ModelOutput, OutputResult, PostedOutput, ToolResultInput } from '../contract/index.js';
import { ServiceError } from '../domain/errors.js';
import type { ToolCall } from '../domain/message.js';
import { renderTools, type ToolSchema } from '../domain/step-render.js';
import type { TokenUsage } from '../domain/model.js';
import type { AdmissionGate } from '../agents/admission-gate.js';
import type { Budgets } from '../budgets/budgets.js';
import type { AgentAuthority } from '../agents/authority.js';
import type { WaiterGate } from '../agents/limits.js';
import type { LeaseView } from './step-lease.js';
import type { LiveAgent, StepClaim } from '../agents/live-agent.js';
import type { ToolPool } from '../tools/backend/tool-pool.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { StepDispatcher } from './step-dispatcher.js';
import type { ServiceTool, ToolRegistry } from '../tools/tool-registry.js';
import type { Tracing } from '../observation/tracing/tracing.js';
import { readOutput } from './chat-output.js';
import type { InterruptedSteps } from './interrupted-steps.js';
import { loggableCall } from './redaction.js';
import { estimateTokens, type LateCredentials, type RenderedStep } from './rendered-step.js';
import type { StepCache } from './step-cache.js';
import { failedCall, refusedByRule, unknownTool, type RunOutcome, type ToolCalls } from '../tools/tool-calls.js';
import { effectKeyOf } from '../tools/effect-keys.js';
import { notAllowedText } from '../domain/approvals.js';
import { refuseWhilePending, type CallRules } from '../approvals/call-rules.js';
import { awaitsCall } from './agent-steps.js';
import type { Approvals } from '../approvals/approvals.js';

export interface StepProtocolDeps {
  authority: AgentAuthority;
  gate: AdmissionGate;
  dispatcher: StepDispatcher<LiveAgent, StepClaim>;
  tools: ToolRegistry;
  calls: ToolCalls;
  log: SessionLog;
  /** Renders each step's messages from what is new since the last one. */
  cache: StepCache;
  /** Bounds the concurrent long-polls per agent. */
  waiters?: WaiterGate | undefined;
  /** A direct claim is refused while a budget stops the agent (budgets.ts). */
  budgets: Pick<Budgets, 'checkClaim'>;
  /** A direct claim is refused while a tenant's time quota stops the agent (tenants/quotas.ts). */
  quotas?: { checkClaim(agent: LiveAgent): void };
  /** Gives an output's usage its cost (domain/pricing.ts). */
  price: (usage: TokenUsage, model: string | undefined) => TokenUsage;
  /** Told which model a backend said answered, for the step's span. */
  tracing: Pick<Tracing, 'answeredBy'>;
  /** Steps whose turn was interrupted: told so even once their incarnation is gone. */
  interrupted: Pick<InterruptedSteps, 'refuse'>;
  /** Where awaiting calls of declared backend tools are offered to workers. */
  pool: Pick<ToolPool, 'offer' | 'offered'>;
  /** What the approval rules say of each call. */
  rules: Pick<CallRules, 'ruleFor'>;
  /** Where a call the rules ask about waits for a person. */
  approvals: Pick<Approvals, 'ask' | 'pendingFor'>;
  /** Where the pieces of an answer being written are published (event streams that ask for deltas). */
  deltas: Pick<StepDeltas, 'publish'>;
}

/** The built-in model driver alone claims and answers the steps of an agent that has a model. */
function refuseDriven(agent: LiveAgent): void {
  if (agent.header.model !== undefined) {
    throw new ServiceError(
      'STEP_CONFLICT',
      `agent "${agent.id}" is driven by the service's built-in model driver; its steps are not claimed or answered over HTTP`,
    );
  }
}

/** A recorded call: it has its effect key. */
type KeyedCall = ToolCall & { effectKey: string };

export class StepProtocol {
  /** Credentials of children that approved calls started or resumed, until the agent's next step carries them. */
  private readonly late = new WeakMap<LiveAgent, LateCredentials>();

  constructor(private readonly deps: StepProtocolDeps) {}

  /** Steps claimed whose output has not arrived: model requests in flight. */
  stepsInFlight(agents: Iterable<LiveAgent>): number {
    let n = 0;
    for (const agent of agents) {
      const turn = agent.state.turn;
      if (turn.phase === 'running' && turn.turn.step.status === 'claimed') n++;
    }
    return n;
  }

  async toolsFor(id: string, token: string | undefined): Promise<ToolSchema[]> {
    const agent = this.deps.authority.liveWithToken(id, token) ?? (await this.deps.authority.rejectCredential(id));
    return this.deps.tools.listFor(agent);
  }

  /**
   * Claim this agent's next step, waiting up to `waitMs`. Null when none (204). `since`: the id
   * of an earlier step whose messages the caller holds (the step then comes in delta form).
   */
  async claimStep(id: string, token: string | undefined, waitMs: number, signal?: AbortSignal, since?: string): Promise<RenderedStep | null> {
    const agent = this.deps.authority.liveWithToken(id, token) ?? (await this.deps.authority.rejectCredential(id));
    refuseDriven(agent);
    this.deps.gate.admitNewWork();
    this.deps.budgets.checkClaim(agent);
    this.deps.quotas?.checkClaim(agent);
    const leave = waitMs > 0 ? this.deps.waiters?.enter(agent.id, 'step long-polls') : undefined;
    try {
      const claim = await this.deps.dispatcher.claimOrWait({ agent }, waitMs, signal);
      if (claim !== null) return await this.handOver(claim, signal, since);
      // A budget or a quota may have stopped the step meanwhile (the long-poll was answered for it).
      this.deps.budgets.checkClaim(agent);
      this.deps.quotas?.checkClaim(agent);
      return null;
    } finally {
      leave?.();
    }
  }

  /** The worker-pool claim: the oldest claimable step of any agent (optionally of one forest). */
  async claimAny(waitMs: number, scope: StepScope, signal?: AbortSignal, since?: string): Promise<{ agentId: string; agentToken: string; step: RenderedStep } | null> {
    this.deps.gate.admitNewWork();
    const claim = await this.deps.dispatcher.claimOrWait({ ...scope }, waitMs, signal);
    if (claim === null) return null;
    const step = await this.handOver(claim, signal, since);
    return step === null ? null : { agentId: claim.agent.id, agentToken: claim.agent.token, step };
  }

  /**
   * The output as posted, in either form (read into one by chat-output.ts). `attempt` is the
   * fence (X-Step-Attempt): only the claim holding the step may answer it.
   */
  async postOutput(id: string, token: string | undefined, stepId: string, posted: PostedOutput, attempt = 1): Promise<OutputResult> {
    const agent = this.deps.authority.liveWithToken(id, token) ?? (await this.rejectStepCaller(id, stepId, token));
    refuseDriven(agent);
    // Read only for the caller that holds the step, in the same synchronous span as the write.
    const { output, refused } = readOutput(posted);
    return this.applyOutput(agent, stepId, output, attempt, refused);
  }

  /**
   * Pieces of the answer the claim `attempt` is writing for a step, published as deltas: only
   * the claim holding the step, before its output. Returns the last delta's seq.
   */
  async postDeltas(id: string, token: string | undefined, stepId: string, pieces: readonly DeltaPiece[], attempt = 1): Promise<{ seq: number }> {
    const agent = this.deps.authority.liveWithToken(id, token) ?? (await this.rejectStepCaller(id, stepId, token));
    refuseDriven(agent);
    agent.steps.checkWriting(stepId, attempt);
    return { seq: this.publishDeltas(agent, stepId, attempt, pieces) };
  }

  /** Publish pieces of a step's answer (the built-in driver's, as they arrive); returns the last seq. */
  publishDeltas(agent: LiveAgent, stepId: string, attempt: number, pieces: readonly DeltaPiece[]): number {
    return this.deps.deltas.publish(agent, stepId, attempt, pieces);
  }

  /** Renew the lease of the claim `attempt` on a step: 200 `{lease}`. */
  async heartbeat(id: string, token: string | undefined, stepId: string, attempt = 1): Promise<{ lease: LeaseView }> {
    const agent = this.deps.authority.liveWithToken(id, token) ?? (await this.rejectStepCaller(id, stepId, token));
    refuseDriven(agent);
    return { lease: agent.steps.heartbeat(stepId, attempt) };
  }

  /**
   * Record a step's output and run its service-owned tool calls. A call listed in `refused`
   * (its arguments could not be read) is recorded with that error as its result instead of
   * being run, whoever's tool it names. The calls run with the turn's signal: an interrupt meanwhile stops
   * them before their effect, and the results not yet recorded then are the stand-ins the
   * interrupt wrote (the response says the turn ended).
   */
  async applyOutput(agent: LiveAgent, stepId: string, output: ModelOutput, attempt: number, refused?: ReadonlyMap<string, string>): Promise<OutputResult> {
    // Every recorded call carries its effect key (a value posted is replaced).
    const calls = (output.toolCalls ?? []).map((c): ToolCall => ({ id: c.id, name: c.name, input: c.input, effectKey: effectKeyOf(agent.id, stepId, c.id) }));
    const duplicate = calls.find((c, i) => calls.findIndex((d) => d.id === c.id) !== i);
    if (duplicate !== undefined) throw new ServiceError('VALIDATION', `tool call id "${duplicate.id}" is used twice in one output`);
    const usage = output.usage === undefined ? undefined : this.deps.price(output.usage, output.model ?? agent.header.model?.model);
    this.deps.tracing.answeredBy(agent, output.model);
    const { ended } = agent.steps.recordOutput(stepId, attempt, output.content, calls.map((c) => loggableCall(c, agent.token)), usage, output.model);
    const result: OutputResult = { toolResults: [], awaiting: [], turn: ended ? 'ended' : 'open' };
    const forWorkers = calls.length > 0 ? await this.runCalls(agent, stepId, calls as KeyedCall[], refused, result) : [];
    await this.deps.log.durable(agent.rootId);
    // Offered once durable: a worker never runs a call a crash could take back.
    for (const call of forWorkers) this.deps.pool.offer(agent, stepId, call);
    return result;
  }

  /**
   * Run an output's service-owned calls, recording each result in the order of the calls, and
   * list the backend's own calls as awaiting. Calls to tools that allow it (MCP tools) run at
   * the same time; the others one after another, in order. If the turn is cancelled while a
   * call runs, the rest are not started and the response says the turn ended. Every call of a
   * tool the service knows is first put to the approval rules, all of them in the span that
   * records the output (so an approval is in the batch of its call): a denied one gets its
   * error result, one to ask about waits for a person (listed in `approvals`) and is neither
   * run nor offered.
   */
  private async runCalls(agent: LiveAgent, stepId: string, calls: readonly KeyedCall[], refused: ReadonlyMap<string, string> | undefined, result: OutputResult): Promise<KeyedCall[]> {
    const forWorkers: KeyedCall[] = [];
    const spawned: AgentCredential[] = [];
    const resumed: AgentCredential[] = [];
    const signal = agent.turnSignal;
    const ruled = new Map<string, 'deny' | 'ask'>();
    for (const call of calls) {
      if (refused?.has(call.id) === true) continue;
      const rule = this.deps.rules.ruleFor(agent, call.name);
      if (rule === 'allow') continue;
      ruled.set(call.id, rule);
      if (rule === 'ask') (result.approvals ??= []).push(this.deps.approvals.ask(agent, stepId, call));
    }
    const hold = agent.steps.holdForServiceCall();
    try {
      // Each call resolves to its outcome, to 'awaiting' (the backend's), or to undefined when
      // the turn was cancelled before it started. A call that is not concurrent is looked up
      // at its turn: an earlier call may have changed what is in scope (spawn, then send_message).
      const resolve = (call: KeyedCall, found?: ServiceTool): Promise<RunOutcome | 'awaiting' | 'asked' | undefined> => {
        const refusal = refused?.get(call.id);
        if (refusal !== undefined) return Promise.resolve(failedCall(call, new ServiceError('VALIDATION', refusal)));
        const rule = ruled.get(call.id);
        if (rule === 'ask') return Promise.resolve('asked');
        if (rule === 'deny') return Promise.resolve(refusedByRule(call, notAllowedText(call.name)));
        if (signal.aborted) return Promise.resolve(undefined);
        const tool = found ?? this.deps.tools.find(agent, call.name);
        if (tool?.owner === 'backend') {
          forWorkers.push(call);
          return Promise.resolve('awaiting');
        }
        if (tool !== undefined) return this.deps.calls.run(agent, tool, call, signal);
        return Promise.resolve(this.deps.tools.withheld(agent, call.name) ? failedCall(call, unknownTool(call.name)) : 'awaiting');
      };
      let inOrder: Promise<unknown> = Promise.resolve();
      const running = calls.map((call) => {
        const tool = refused?.has(call.id) === true ? undefined : this.deps.tools.find(agent, call.name);
        if (tool?.concurrent === true) return { call, outcome: resolve(call, tool) };
        const outcome = inOrder.then(() => resolve(call));
        inOrder = outcome;
        return { call, outcome };
      });
      for (const { call, outcome } of running) {
        const done = await outcome;
        if (done === undefined || done === 'asked') continue; // not started: the turn was cancelled before, or a person decides
        if (done === 'awaiting') {
          // As posted: the key is in the log, and in the tool pool's offer.
          result.awaiting.push({ id: call.id, name: call.name, input: call.input });
          continue;
        }
        spawned.push(...done.spawned);
        resumed.push(...done.resumed);
        if (signal.aborted) continue; // the turn was cancelled meanwhile; its stand-in result is logged
        agent.steps.recordToolResult(stepId, call.id, done.result.content, done.result.isError);
        result.toolResults.push(done.result);
      }
    } finally {
      hold();
    }
    if (signal.aborted) {
      result.turn = 'ended';
      result.awaiting = [];
      delete result.approvals;
      return [];
    }
    if (spawned.length > 0) result.spawned = spawned;
    if (resumed.length > 0) result.resumed = resumed;
    return forWorkers;
  }

  /**
   * Execute a call a person approved, as the step would have run it (its decision is durable):
   * a service-owned or MCP tool runs now with the call's effect key; a declared backend tool is
   * offered to the tool workers; a tool the agent no longer has gets the unknown-tool result.
   */
  runApproved(agent: LiveAgent, stepId: string, call: KeyedCall): void {
    if (!awaitsCall(agent, stepId, call.id)) return;
    const tool = this.deps.tools.find(agent, call.name);
    if (tool?.owner === 'backend') {
      this.deps.pool.offer(agent, stepId, call);
      return;
    }
    if (tool === undefined) {
      agent.steps.recordToolResult(stepId, call.id, `Error: ${unknownTool(call.name).message}`, true);
      void this.deps.log.durable(agent.rootId).catch(() => undefined);
      return;
    }
    const signal = agent.turnSignal;
    const hold = agent.steps.holdForServiceCall();
    const run = async (): Promise<void> => {
      try {
        // A service-owned tool marks no start of its own: the mark makes an approved call that a
        // crash interrupts end as of unknown outcome at the resume, never run twice.
        if (tool.afterRestart === undefined) await this.deps.calls.started(agent, call.id, call.effectKey);
        if (signal.aborted || !awaitsCall(agent, stepId, call.id)) return;
        const done = await this.deps.calls.run(agent, tool, call, signal);
        if (done.spawned.length + done.resumed.length > 0) this.noteLateCredentials(agent, done);
        if (signal.aborted || !awaitsCall(agent, stepId, call.id)) return;
        agent.steps.recordToolResult(stepId, call.id, done.result.content, done.result.isError);
        await this.deps.log.durable(agent.rootId);
      } finally {
        hold();
      }
    };
    void run().catch((error: unknown) => agent.failTurn(`running an approved tool call failed: ${String(error)}`));
  }

  /** Children's credentials that no answer carried: they go with `agent`'s next step. */
  noteLateCredentials(agent: LiveAgent, credentials: Partial<LateCredentials>): void {
    const late = this.late.get(agent) ?? { spawned: [], resumed: [] };
    late.spawned.push(...(credentials.spawned ?? []));
    late.resumed.push(...(credentials.resumed ?? []));
    this.late.set(agent, late);
  }

  /** Whether `name` is a tool the operator's backend runs, declared and granted to this agent. */
  runByBackend(agent: LiveAgent, name: string): boolean {
    return this.deps.tools.find(agent, name)?.owner === 'backend';
  }

  async postToolResults(id: string, token: string | undefined, stepId: string, results: ToolResultInput[], attempt = 1): Promise<{ turn: 'open' | 'ended' }> {
    const agent = this.deps.authority.liveWithToken(id, token) ?? (await this.rejectStepCaller(id, stepId, token));
    // A driven agent's calls of declared backend tools are answered by the backend's workers.
    if (results.length === 0 || !results.every((r) => this.deps.pool.offered(agent.id, r.toolCallId))) refuseDriven(agent);
    return this.applyToolResults(agent, stepId, results, attempt);
  }

  async applyToolResults(agent: LiveAgent, stepId: string, results: readonly ToolResultInput[], attempt: number): Promise<{ turn: 'open' | 'ended' }> {
    // Validate the whole batch before writing any of it, so a rejected request changes nothing.
    agent.steps.checkToolResults(stepId, results.map((r) => r.toolCallId), attempt);
    for (const r of results) refuseWhilePending(this.deps.approvals.pendingFor(agent, r.toolCallId), stepId);
    for (const r of results) agent.steps.recordToolResult(stepId, r.toolCallId, r.content, r.isError === true, attempt);
    await this.deps.log.durable(agent.rootId);
    return { turn: 'open' };
  }

  /**
   * A request about `stepId` whose token is not the live incarnation's: 409 when that token's
   * incarnation held the step when its turn was interrupted, else AGENT_NOT_FOUND or UNAUTHORIZED.
   */
  private async rejectStepCaller(id: string, stepId: string, token: string | undefined): Promise<never> {
    this.deps.interrupted.refuse(id, stepId, token);
    return this.deps.authority.rejectCredential(id);
  }

  /**
   * A claimed step as a model request: the log up to its step-start as messages (after `since`
   * when the cache knows that step), and the agent's tools.
   */
  async renderStep(claim: StepClaim, since?: string): Promise<RenderedStep> {
    const messages = await this.deps.cache.render(claim.agent, claim.stepId, claim.upToSeq, since);
    const toolsJson = JSON.stringify(renderTools(this.deps.tools.listFor(claim.agent)));
    const credentials = this.late.get(claim.agent);
    this.late.delete(claim.agent);
    return {
      id: claim.stepId,
      turnId: claim.turnId,
      index: claim.index,
      lease: claim.lease,
      messages,
      toolsJson,
      estimatedTokens: estimateTokens(messages.mark.bytes + Buffer.byteLength(toolsJson)),
      credentials,
    };
  }

  /** Render a claimed step; if its caller left meanwhile, give the step (and what it carried) back instead. */
  private async handOver(claim: StepClaim, signal: AbortSignal | undefined, since: string | undefined): Promise<RenderedStep | null> {
    const step = await this.renderStep(claim, since);
    if (signal?.aborted !== true) return step;
    if (step.credentials !== undefined && !this.late.has(claim.agent)) this.late.set(claim.agent, step.credentials);
    claim.agent.steps.release(claim.stepId);
    return null;
  }
}

