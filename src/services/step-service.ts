/**
 * The step protocol: claiming model requests (per agent or from the worker pool), recording
 * the model's output and running service-owned tools at once, recording the backend's own
 * tool results, and `POST /v1/agents/{id}/tool-calls`. Every tool call and result is written
 * to the caller's session.
 */
import type { Logger } from 'pino';
import { ServiceError } from '../domain/errors.js';
import type { Message, TextBlock, ToolCall } from '../domain/message.js';
import type { TokenUsage } from '../domain/model.js';
import { renderMessages, renderTools, type ChatMessage, type ChatTool, type ToolSchema } from '../domain/step-render.js';
import type { AgentService } from './agent-service.js';
import type { LiveAgent, StepClaim } from './live-agent.js';
import type { SessionLog } from './session-log.js';
import type { WaiterGate } from './limits.js';
import type { IdempotencyKeys, IdempotencyRequest } from './idempotency.js';
import type { StepDispatcher } from './step-dispatcher.js';
import type { AgentCredential, ServiceTool, ToolExecution, ToolOutcome, ToolRegistry } from './tool-registry.js';

export interface Step {
  id: string;
  turnId: string;
  index: number;
  messages: ChatMessage[];
  tools: ChatTool[];
}

export interface ToolResultView {
  toolCallId: string;
  name: string;
  isError: boolean;
  /** The canonical value; absent for errors. */
  output?: unknown;
  content: string;
}

export interface OutputResult {
  toolResults: ToolResultView[];
  awaiting: ToolCall[];
  turn: 'open' | 'ended';
  spawned?: AgentCredential[];
  resumed?: AgentCredential[];
}

export interface StepServiceDeps {
  agents: AgentService;
  dispatcher: StepDispatcher<LiveAgent, StepClaim>;
  tools: ToolRegistry;
  log: SessionLog;
  logger: Logger;
  idempotency: IdempotencyKeys;
  /** Bounds the concurrent long-polls per agent. */
  waiters?: WaiterGate;
}

/** The model's answer to a step, as a backend or the built-in driver posts it. */
export interface ModelOutput {
  content?: string | TextBlock[];
  toolCalls?: ToolCall[];
  usage?: TokenUsage;
}

export interface ToolResultInput {
  toolCallId: string;
  content: string | TextBlock[];
  isError?: boolean;
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

export type CallResult = ToolResultView & { spawned?: AgentCredential[]; resumed?: AgentCredential[] };

function callView(call: ToolCall, outcome: ToolOutcome): CallResult {
  const view: CallResult = { toolCallId: call.id, name: call.name, isError: false, output: outcome.output, content: outcome.content };
  if (outcome.spawned !== undefined && outcome.spawned.length > 0) view.spawned = outcome.spawned;
  if (outcome.resumed !== undefined && outcome.resumed.length > 0) view.resumed = outcome.resumed;
  return view;
}

/** A stored result never holds a token. */
function withoutTokens(view: CallResult): CallResult {
  const strip = (list: AgentCredential[] | undefined): AgentCredential[] | undefined => list?.map((c) => ({ agentId: c.agentId, agentToken: '' }));
  const out: CallResult = { ...view };
  const spawned = strip(view.spawned);
  const resumed = strip(view.resumed);
  if (spawned !== undefined) out.spawned = spawned;
  if (resumed !== undefined) out.resumed = resumed;
  return out;
}

/**
 * A tool call as it may be logged: any occurrence of the caller's own token inside its input
 * replaced. A backend that pastes its token into a model's tool input must not turn the
 * append-only session into a store of credentials.
 */
export function loggableCall(call: ToolCall, token: string): ToolCall {
  if (!mentions(call.input, token)) return call;
  const scrub = (value: unknown): unknown => {
    if (typeof value === 'string') return value.split(token).join('[redacted]');
    if (Array.isArray(value)) return value.map(scrub);
    if (value !== null && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [scrub(k) as string, scrub(v)]));
    }
    return value;
  };
  return { ...call, input: scrub(call.input) };
}

/**
 * True when any string in a JSON value, key or value, contains `text`. A token has no
 * character JSON escapes, so this finds exactly what a search of the value's JSON text would,
 * without writing that text for every call.
 */
function mentions(value: unknown, text: string): boolean {
  if (typeof value === 'string') return value.includes(text);
  if (value === null || typeof value !== 'object') return false;
  if (Array.isArray(value)) return value.some((item) => mentions(item, text));
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    if (key.includes(text) || mentions((value as Record<string, unknown>)[key], text)) return true;
  }
  return false;
}

/** True when the agent's open step awaits a result for this tool call id. */
function awaitedByStep(agent: LiveAgent, callId: string): boolean {
  const turn = agent.state.turn;
  return turn.phase === 'running' && turn.turn.step.awaiting.includes(callId);
}

interface RunOutcome {
  result: ToolResultView;
  spawned: AgentCredential[];
  resumed: AgentCredential[];
  error?: ServiceError;
}

export class StepService {
  constructor(private readonly deps: StepServiceDeps) {}

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
    const agent = this.deps.agents.liveWithToken(id, token) ?? (await this.deps.agents.rejectCredential(id));
    return this.deps.tools.listFor(agent);
  }

  /** Claim this agent's next step, waiting up to `waitMs`. Null when none (204). */
  async claimStep(id: string, token: string | undefined, waitMs: number, signal?: AbortSignal): Promise<Step | null> {
    const agent = this.deps.agents.liveWithToken(id, token) ?? (await this.deps.agents.rejectCredential(id));
    refuseDriven(agent);
    this.deps.agents.admitNewWork();
    const leave = waitMs > 0 ? this.deps.waiters?.enter(agent.id, 'step long-polls') : undefined;
    try {
      const claim = await this.deps.dispatcher.claimOrWait({ agent }, waitMs, signal);
      return claim === null ? null : await this.handOver(claim, signal);
    } finally {
      leave?.();
    }
  }

  /** The worker-pool claim: the oldest claimable step of any agent (optionally of one forest). */
  async claimAny(waitMs: number, rootId: string | undefined, signal?: AbortSignal): Promise<{ agentId: string; agentToken: string; step: Step } | null> {
    this.deps.agents.admitNewWork();
    const claim = await this.deps.dispatcher.claimOrWait(rootId === undefined ? {} : { rootId }, waitMs, signal);
    if (claim === null) return null;
    const step = await this.handOver(claim, signal);
    return step === null ? null : { agentId: claim.agent.id, agentToken: claim.agent.token, step };
  }

  async postOutput(
    id: string,
    token: string | undefined,
    stepId: string,
    output: ModelOutput,
  ): Promise<OutputResult> {
    const agent = this.deps.agents.liveWithToken(id, token) ?? (await this.deps.agents.rejectCredential(id));
    refuseDriven(agent);
    return this.applyOutput(agent, stepId, output);
  }

  /**
   * Record a step's output and run its service-owned tool calls. A call listed in `refused`
   * (the driver could not read its arguments) is recorded with that error as its result
   * instead of being run.
   */
  async applyOutput(agent: LiveAgent, stepId: string, output: ModelOutput, refused?: ReadonlyMap<string, string>): Promise<OutputResult> {
    const calls = output.toolCalls ?? [];
    const duplicate = calls.find((c, i) => calls.findIndex((d) => d.id === c.id) !== i);
    if (duplicate !== undefined) throw new ServiceError('VALIDATION', `tool call id "${duplicate.id}" is used twice in one output`);
    const { ended } = agent.recordOutput(stepId, output.content, calls.map((c) => loggableCall(c, agent.token)), output.usage);
    const result: OutputResult = { toolResults: [], awaiting: [], turn: ended ? 'ended' : 'open' };
    const spawned: AgentCredential[] = [];
    const resumed: AgentCredential[] = [];
    for (const call of calls) {
      const refusal = refused?.get(call.id);
      if (refusal !== undefined) {
        const failed = this.failure(call, new ServiceError('VALIDATION', refusal)).result;
        agent.recordToolResult(stepId, call.id, failed.content, true);
        result.toolResults.push(failed);
        continue;
      }
      const tool = this.deps.tools.find(agent, call.name);
      if (tool === undefined) {
        result.awaiting.push(call);
        continue;
      }
      const outcome = await this.run(agent, tool, call);
      agent.recordToolResult(stepId, call.id, outcome.result.content, outcome.result.isError);
      result.toolResults.push(outcome.result);
      spawned.push(...outcome.spawned);
      resumed.push(...outcome.resumed);
    }
    if (spawned.length > 0) result.spawned = spawned;
    if (resumed.length > 0) result.resumed = resumed;
    await this.deps.log.durable();
    return result;
  }

  async postToolResults(
    id: string,
    token: string | undefined,
    stepId: string,
    results: ToolResultInput[],
  ): Promise<{ turn: 'open' | 'ended' }> {
    const agent = this.deps.agents.liveWithToken(id, token) ?? (await this.deps.agents.rejectCredential(id));
    refuseDriven(agent);
    return this.applyToolResults(agent, stepId, results);
  }

  async applyToolResults(agent: LiveAgent, stepId: string, results: readonly ToolResultInput[]): Promise<{ turn: 'open' | 'ended' }> {
    // Validate the whole batch before writing any of it, so a rejected request changes nothing.
    agent.checkToolResults(stepId, results.map((r) => r.toolCallId));
    for (const r of results) agent.recordToolResult(stepId, r.toolCallId, r.content, r.isError === true);
    await this.deps.log.durable();
    return { turn: 'open' };
  }

  /**
   * Run one service-owned tool as this agent, outside a step's output. The call and its
   * result are written to the agent's session: as the result of the open step's call with the
   * same id when there is one, otherwise as a call/result pair at the next safe position.
   * Errors are rethrown with the same text the session records.
   */
  async callTool(
    id: string,
    token: string | undefined,
    body: { name: string; input: unknown; toolCallId?: string },
    signal?: AbortSignal,
    idem?: IdempotencyRequest,
  ): Promise<CallResult & { replayed: boolean }> {
    const agent = this.deps.agents.liveWithToken(id, token) ?? (await this.rejectToolCaller(id, body.name, token));
    if (idem === undefined) {
      // No key: nothing to record or replay, and the view is the caller's own.
      const view: CallResult & { replayed?: boolean } = await this.invoke(agent, body, signal);
      view.replayed = false;
      return view as CallResult & { replayed: boolean };
    }
    const result = await this.deps.idempotency.run<CallResult>(agent.id, idem, 200, async (record) => {
      // The key lookup awaited: act only if this is still the live incarnation.
      if (this.deps.agents.liveWithToken(id, token) !== agent) await this.rejectToolCaller(id, body.name, token);
      return this.invoke(agent, body, signal, record);
    });
    // A stored result never holds a token: a replay names each child's current one.
    const current = (list: AgentCredential[] | undefined): AgentCredential[] | undefined =>
      list?.map((c) => ({ agentId: c.agentId, agentToken: this.deps.agents.currentToken(c.agentId) }));
    const out: CallResult & { replayed: boolean } = { ...result.body, replayed: result.replayed };
    if (result.replayed) {
      const spawned = current(result.body.spawned);
      const resumed = current(result.body.resumed);
      if (spawned !== undefined) out.spawned = spawned;
      if (resumed !== undefined) out.resumed = resumed;
    }
    return out;
  }

  /**
   * Run one tool call as `agent` and log it; resolves once durable with a view of its own.
   * `record`, under an idempotency key, receives the success once, without tokens, in the
   * synchronous span of the tool's effect.
   */
  private async invoke(
    agent: LiveAgent,
    body: { name: string; input: unknown; toolCallId?: string },
    signal: AbortSignal | undefined,
    record?: (view: CallResult) => void,
  ): Promise<CallResult> {
    const call: ToolCall = { id: body.toolCallId ?? agent.newMessageId(), name: body.name, input: body.input };
    // A call the open step does not await is logged as context, a call and its result: with
    // no room for them it is refused before it runs, and the room is held until it is logged.
    const releaseRoom = awaitedByStep(agent, call.id) ? undefined : agent.reserveRoom(2);
    const tool = this.deps.tools.find(agent, call.name);
    let recorded = false;
    // Only successes are kept (a failed call delivered nothing, so a retry may run it again),
    // recorded in the synchronous span of the tool's effect.
    const keep = record === undefined
      ? undefined
      : (view: CallResult): void => {
          if (recorded) return;
          recorded = true;
          record(withoutTokens(view));
        };
    let outcome: RunOutcome;
    try {
      outcome = tool === undefined
        ? this.failure(call, new ServiceError('TOOL_NOT_FOUND', `unknown tool "${call.name}"`))
        : await this.run(agent, tool, call, signal, keep === undefined ? undefined : (accepted) => keep(callView(call, accepted)));
    } finally {
      releaseRoom?.();
    }
    this.record(agent, call, outcome.result);
    const view: CallResult = outcome.result;
    if (outcome.spawned.length > 0) view.spawned = outcome.spawned;
    if (outcome.resumed.length > 0) view.resumed = outcome.resumed;
    if (outcome.error === undefined) keep?.(view);
    await this.deps.log.durable();
    if (outcome.error !== undefined) throw outcome.error;
    return view;
  }

  /**
   * A call from anything but the exact live incarnation is refused: a report in the report's
   * own words; any other tool called with no agent token at all, as the reference words a call
   * with no calling agent.
   */
  private async rejectToolCaller(id: string, tool: string, token: string | undefined): Promise<never> {
    try {
      return await this.deps.agents.rejectCredential(id);
    } catch (error) {
      if (error instanceof ServiceError && error.code === 'UNAUTHORIZED') {
        if (tool === 'report') throw new ServiceError('UNAUTHORIZED', `agent "${id}" is not a live continuable subagent and cannot report`);
        if (token === undefined || token === '') {
          throw new ServiceError('UNAUTHORIZED', `${tool} requires a calling agent (the request carried no X-Agent-Token for agent "${id}")`);
        }
      }
      throw error;
    }
  }

  private record(agent: LiveAgent, call: ToolCall, result: ToolResultView): void {
    const turn = agent.state.turn;
    if (turn.phase === 'running' && awaitedByStep(agent, call.id)) {
      agent.recordToolResult(turn.turn.step.id, call.id, result.content, result.isError);
      return;
    }
    const assistant: Message = { id: agent.newMessageId(), role: 'assistant', content: [], source: { kind: 'model' }, toolCalls: [loggableCall(call, agent.token)] };
    const toolMessage: Message = {
      id: agent.newMessageId(),
      role: 'tool',
      content: [{ type: 'text', text: result.content }],
      source: { kind: 'tool' },
      toolCallId: call.id,
    };
    if (result.isError) toolMessage.isError = true;
    agent.recordContext([assistant, toolMessage]);
  }

  private async run(
    agent: LiveAgent,
    tool: ServiceTool,
    call: ToolCall,
    signal?: AbortSignal,
    accepted?: (outcome: ToolOutcome) => void,
  ): Promise<RunOutcome> {
    try {
      const exec: ToolExecution = { agent, toolCallId: call.id };
      if (signal !== undefined) exec.signal = signal;
      if (accepted !== undefined) exec.accepted = accepted;
      const outcome = await tool.execute(call.input, exec);
      return {
        result: { toolCallId: call.id, name: call.name, isError: false, output: outcome.output, content: outcome.content },
        spawned: outcome.spawned ?? [],
        resumed: outcome.resumed ?? [],
      };
    } catch (error) {
      if (error instanceof ServiceError) return this.failure(call, error);
      if (signal?.aborted === true) return this.failure(call, new ServiceError('CANCELLED', 'the call was cancelled before it was admitted'));
      this.deps.logger.error({ err: error, tool: call.name }, 'service tool failed');
      return this.failure(call, new ServiceError('INTERNAL', `tool "${call.name}" failed`));
    }
  }

  private failure(call: ToolCall, error: ServiceError): RunOutcome {
    return {
      result: { toolCallId: call.id, name: call.name, isError: true, content: `Error: ${error.message}` },
      spawned: [],
      resumed: [],
      error,
    };
  }

  /** Render a claimed step; if its caller left meanwhile, give the step back instead. */
  private async handOver(claim: StepClaim, signal: AbortSignal | undefined): Promise<Step | null> {
    const step = await this.renderStep(claim);
    if (signal?.aborted !== true) return step;
    claim.agent.releaseClaim(claim.stepId);
    return null;
  }

  /** A claimed step as a model request: the log up to its step-start, and the agent's tools. */
  async renderStep(claim: StepClaim): Promise<Step> {
    // Seqs are gap-free from 1, so the first `upToSeq` entries are exactly the step's context.
    const upTo = await this.deps.log.read(claim.agent.id, 0, claim.upToSeq);
    return {
      id: claim.stepId,
      turnId: claim.turnId,
      index: claim.index,
      messages: renderMessages(claim.agent.header.instructions, upTo),
      tools: renderTools(this.deps.tools.listFor(claim.agent)),
    };
  }
}
