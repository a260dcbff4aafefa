/**
 * Tool-call execution: running one service-owned tool as an agent, turning its outcome or its
 * failure into the result the session records, and `POST /v1/agents/{id}/tool-calls` (a call
 * outside a step's output, with an optional idempotency key).
 *
 * Invariants: every call that ran and its result are written to the caller's session (the
 * input redacted, see redaction.ts), except a failure the caller says refuses its request
 * (`writesFailure`), which writes nothing; a failed call's result is `Error: <message>` and the
 * same ServiceError is what the caller gets; under an idempotency key only a success is kept,
 * without tokens, recorded in the synchronous span of the tool's effect.
 */
import type { Logger } from 'pino';
import type { AgentCredential, ToolCallBody, ToolResult } from '../contract/index.js';
import { ServiceError } from '../domain/errors.js';
import type { Message, ToolCall } from '../domain/message.js';
import type { AgentAuthority } from '../agents/authority.js';
import type { IdempotencyKeys, IdempotencyRequest } from '../sessions/idempotency.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { ServiceTool, ToolExecution, ToolOutcome, ToolRegistry } from './tool-registry.js';
import type { Tracing } from '../observation/tracing/tracing.js';
import type { Clock } from '../domain/ports.js';
import { effectKeyOf } from './effect-keys.js';
import { needsStepText, notAllowedText, type RuleDecision } from '../domain/approvals.js';
import { loggableCall, withoutTokens } from '../steps/redaction.js';

/** A call's result as the route sees it: the contract's tool result plus the credentials it returns (the route's wire shape drops `name`). */
export type CallResult = ToolResult & { spawned?: AgentCredential[]; resumed?: AgentCredential[] };

/** How a call outside a step's output is made. */
export interface CallOptions {
  /** Aborted when the caller went away: a call not yet admitted is CANCELLED. */
  signal?: AbortSignal | undefined;
  /** An idempotency key: a success is kept and replayed. */
  idem?: IdempotencyRequest | undefined;
  /**
   * Whether a failure is still written to the session as the call and its error result
   * (absent: always). False for a failure that refuses the request, which must change nothing.
   */
  writesFailure?: ((error: ServiceError) => boolean) | undefined;
}

/** What running one tool call came to; `error` is set when it failed. */
export interface RunOutcome {
  result: ToolResult;
  spawned: AgentCredential[];
  resumed: AgentCredential[];
  error?: ServiceError;
}

export interface ToolCallDeps {
  authority: AgentAuthority;
  tools: ToolRegistry;
  log: SessionLog;
  logger: Logger;
  idempotency: IdempotencyKeys;
  /** Runs each service-owned call (under its span when tracing). */
  tracing: Pick<Tracing, 'runTool'>;
  clock: Clock;
  /** What the approval rules say of a call of `tool` in forest `rootId` of tenant `tenantId` (undefined: an admin's forest). */
  rule: (tool: string, rootId: string, tenantId: string | undefined) => RuleDecision;
  /** Refuses (STEP_CONFLICT) a call that names a call of the open step a person has yet to decide. */
  refuseWhilePending: (agent: LiveAgent, stepId: string, callId: string) => void;
}

/** A failed call: its result carries the error's text, and the error is kept to be thrown. */
export function failedCall(call: ToolCall, error: ServiceError): RunOutcome {
  return {
    result: { toolCallId: call.id, name: call.name, isError: true, content: `Error: ${error.message}` },
    spawned: [],
    resumed: [],
    error,
  };
}

/** A call an approval rule keeps from running: its error result is recorded like any result, so the model reads it. */
export function refusedByRule(call: ToolCall, text: string): RunOutcome {
  return { result: { toolCallId: call.id, name: call.name, isError: true, content: text }, spawned: [], resumed: [] };
}

/** The refusal of a call to a tool the caller does not have (unknown, or not granted to it). */
export function unknownTool(name: string): ServiceError {
  return new ServiceError('TOOL_NOT_FOUND', `unknown tool "${name}"`);
}

function callView(call: ToolCall, outcome: ToolOutcome): CallResult {
  const view: CallResult = { toolCallId: call.id, name: call.name, isError: false, output: outcome.output, content: outcome.content };
  if (outcome.spawned !== undefined && outcome.spawned.length > 0) view.spawned = outcome.spawned;
  if (outcome.resumed !== undefined && outcome.resumed.length > 0) view.resumed = outcome.resumed;
  return view;
}

/** The open step that awaits a result for this tool call id, if any. */
function awaitingStep(agent: LiveAgent, callId: string): string | undefined {
  const turn = agent.state.turn;
  return turn.phase === 'running' && turn.turn.step.awaiting.includes(callId) ? turn.turn.step.id : undefined;
}

function awaitedByStep(agent: LiveAgent, callId: string): boolean {
  return awaitingStep(agent, callId) !== undefined;
}

export class ToolCalls {
  constructor(private readonly deps: ToolCallDeps) {}

  /**
   * Run one service-owned tool as this agent, outside a step's output. The call and its
   * result are written to the agent's session: as the result of the open step's call with the
   * same id when there is one, otherwise as a call/result pair at the next safe position. A
   * failure is rethrown with the text the session would record; it is written only when
   * `writesFailure` says so.
   */
  async callTool(id: string, token: string | undefined, body: ToolCallBody, options: CallOptions = {}): Promise<CallResult & { replayed: boolean }> {
    const { authority } = this.deps;
    const { signal, idem, writesFailure } = options;
    const agent = authority.liveWithToken(id, token) ?? (await this.rejectToolCaller(id, body.name, token));
    if (idem === undefined) {
      // No key: nothing to record or replay, and the view is the caller's own.
      const view: CallResult & { replayed?: boolean } = await this.invoke(agent, body, signal, writesFailure);
      view.replayed = false;
      return view as CallResult & { replayed: boolean };
    }
    const result = await this.deps.idempotency.run<CallResult>({ sender: agent.id, rootId: agent.rootId }, idem, 200, async (record) => {
      // The key lookup awaited: act only if this is still the live incarnation.
      if (authority.liveWithToken(id, token) !== agent) await this.rejectToolCaller(id, body.name, token);
      return this.invoke(agent, body, signal, writesFailure, record);
    });
    // A stored result never holds a token: a replay names each child's current one.
    const current = (list: AgentCredential[] | undefined): AgentCredential[] | undefined =>
      list?.map((c) => ({ agentId: c.agentId, agentToken: authority.currentToken(c.agentId) }));
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
   * Run a service-owned tool as `agent`. A ServiceError becomes the call's failed result; a
   * call aborted before it was admitted, CANCELLED; anything else is logged and becomes
   * INTERNAL, its text never shown. `accepted` is handed to the tool (see ToolExecution).
   */
  async run(agent: LiveAgent, tool: ServiceTool, call: ToolCall, signal?: AbortSignal, accepted?: (outcome: ToolOutcome) => void): Promise<RunOutcome> {
    try {
      const effectKey = call.effectKey ?? effectKeyOf(agent.id, agent.id, call.id);
      const exec: ToolExecution = { agent, toolCallId: call.id, effectKey, started: () => this.started(agent, call.id, effectKey) };
      if (signal !== undefined) exec.signal = signal;
      if (accepted !== undefined) exec.accepted = accepted;
      const outcome = await this.deps.tracing.runTool(tool, call, exec);
      return {
        result: { toolCallId: call.id, name: call.name, isError: outcome.isError === true, output: outcome.output, content: outcome.content },
        spawned: outcome.spawned ?? [],
        resumed: outcome.resumed ?? [],
      };
    } catch (error) {
      if (error instanceof ServiceError) return failedCall(call, error);
      if (signal?.aborted === true) return failedCall(call, new ServiceError('CANCELLED', 'the call was cancelled before it was admitted'));
      this.deps.logger.error({ err: error, tool: call.name }, 'service tool failed');
      return failedCall(call, new ServiceError('INTERNAL', `tool "${call.name}" failed`));
    }
  }

  /** Record, durably, that a call is about to take effect (ToolExecution.started). */
  async started(agent: LiveAgent, toolCallId: string, effectKey: string): Promise<void> {
    this.deps.log.append(agent.id, { type: 'tool-started', at: this.deps.clock.iso(), toolCallId, effectKey });
    await this.deps.log.durable(agent.rootId);
  }

  /**
   * Run one tool call as `agent` and log it; resolves once durable with a view of its own.
   * A failure `writesFailure` turns down is thrown without writing anything. `record`, under
   * an idempotency key, receives the success once, without tokens, in the synchronous span of
   * the tool's effect.
   */
  private async invoke(
    agent: LiveAgent,
    body: ToolCallBody,
    signal: AbortSignal | undefined,
    writesFailure: CallOptions['writesFailure'],
    record?: (view: CallResult) => void,
  ): Promise<CallResult> {
    const id = body.toolCallId ?? agent.newMessageId();
    // A call the open step does not await is logged as context, a call and its result: with
    // no room for them it is refused before it runs, and the room is held until it is logged.
    // Its effect key is then of the message that will hold it.
    const stepId = awaitingStep(agent, id);
    if (stepId !== undefined) this.deps.refuseWhilePending(agent, stepId, id);
    const contextId = stepId === undefined ? agent.newMessageId() : undefined;
    const call: ToolCall = { id, name: body.name, input: body.input, effectKey: effectKeyOf(agent.id, stepId ?? contextId!, id) };
    const releaseRoom = stepId !== undefined ? undefined : agent.reserveRoom(2);
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
    // A call outside a step cannot wait for a person: one the rules ask about is refused like a denied one.
    const rule = tool === undefined ? 'allow' : this.deps.rule(call.name, agent.rootId, agent.header.tenantId);
    let outcome: RunOutcome;
    try {
      outcome = tool === undefined
        ? failedCall(call, unknownTool(call.name))
        : rule === 'deny'
          ? refusedByRule(call, notAllowedText(call.name))
          : rule === 'ask'
            ? refusedByRule(call, needsStepText(call.name))
            : await this.run(agent, tool, call, signal, keep === undefined ? undefined : (accepted) => keep(callView(call, accepted)));
    } finally {
      releaseRoom?.();
    }
    if (outcome.error !== undefined && writesFailure?.(outcome.error) === false) throw outcome.error;
    this.record(agent, call, outcome.result, contextId);
    const view: CallResult = outcome.result;
    if (outcome.spawned.length > 0) view.spawned = outcome.spawned;
    if (outcome.resumed.length > 0) view.resumed = outcome.resumed;
    if (outcome.error === undefined) keep?.(view);
    await this.deps.log.durable(agent.rootId);
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
      return await this.deps.authority.rejectCredential(id);
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

  /** Log a call and its result: the open step's awaited result, or a call/result pair as context. */
  private record(agent: LiveAgent, call: ToolCall, result: ToolResult, contextId: string | undefined): void {
    const turn = agent.state.turn;
    if (turn.phase === 'running' && awaitedByStep(agent, call.id)) {
      agent.steps.recordToolResult(turn.turn.step.id, call.id, result.content, result.isError);
      return;
    }
    const assistant: Message = { id: contextId ?? agent.newMessageId(), role: 'assistant', content: [], source: { kind: 'model' }, toolCalls: [loggableCall(call, agent.token)] };
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
}
