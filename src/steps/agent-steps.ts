/**
 * The steps of one live agent incarnation: claiming them under a lease, the fence every later
 * request for a step passes (the attempt that holds it), heartbeats, recording the model's
 * output and the tool results, what happens when a lease runs out, and re-opening a turn that
 * a stopped process left open. It moves the agent's turn state only through the agent's own
 * `apply` (the host port), so every transition still runs in one synchronous span with its
 * log appends.
 *
 * Invariants: a request fenced by an attempt other than the one holding the step changes
 * nothing; a lapsed step is claimed again under its own id, so exactly one attempt's output is
 * recorded; a call that will never get its result gets an error result, so the log never
 * keeps a tool call without one.
 */
import type { Clock, IdSource } from '../domain/ports.js';
import type { TokenUsage } from '../domain/model.js';
import { ServiceError } from '../domain/errors.js';
import { textBlocks, type Message, type TextBlock, type ToolCall } from '../domain/message.js';
import type { SessionEntry } from '../domain/session.js';
import type { Approval } from '../domain/approvals.js';
import { closeTurn, heldStep, lapseStep, openTurnFromLog, recordOutput, recordToolResult, releaseStep, reopenTurn, startStep, unansweredCalls, type AgentState, type Transition } from '../domain/turn-machine.js';
import type { LiveAgent } from '../agents/live-agent.js';
import { RecentSteps } from './recent-steps.js';
import { StepLease, type LeaseOptions, type LeaseView } from './step-lease.js';

/** What a claim hands the caller: the step's identity and the log position it was cut at. */
export interface StepClaim {
  agent: LiveAgent;
  stepId: string;
  turnId: string;
  index: number;
  /** The seq of the step-start entry: the step's messages are the log up to here. */
  upToSeq: number;
  /** The lease the claim holds the step under; its attempt is the fence of later requests. */
  lease: LeaseView;
}

/** What happened to a step lease, for the metrics. */
export type LeaseEvent = 'expired' | 'reclaimed';

/** The agent these steps belong to, as they need it. */
export interface StepHost {
  readonly agent: LiveAgent;
  readonly id: string;
  state(): AgentState;
  disposing(): boolean;
  readonly ids: IdSource;
  apply(transition: Transition): number[];
  failTurn(error: string): void;
  now(): string;
  /** A lease event of the step `stepId`, under `attempt` (the lapsed one, or the new claim's). */
  onLease?: ((event: LeaseEvent, stepId: string, attempt: number) => void) | undefined;
  /**
   * A re-opened step's calls left without a result: returns the ids of those the service runs
   * again itself (their results come later); the others get stand-in error results.
   */
  rerunAfterRestart?: ((stepId: string, calls: readonly UnansweredCall[]) => ReadonlySet<string>) | undefined;
  /** Whether the tool worker pool holds calls of this step: its lease, not the step's, bounds them. */
  workersHold?: ((stepId: string) => boolean) | undefined;
  /** Whether a call of the open step waits on a person's decision (it was not run). */
  waitsOnPerson?: ((callId: string) => boolean) | undefined;
}

/** A call a re-opened step still awaits, whether the service had recorded that it started it, and its approval's last entry. */
export interface UnansweredCall {
  call: ToolCall;
  started: boolean;
  approval?: Approval;
}

export class AgentSteps {
  /** Step ids this incarnation handed out, to tell STEP_CONFLICT from STEP_NOT_FOUND. */
  private readonly recent = new RecentSteps();
  private readonly lease: StepLease;
  /** Service-owned tool calls of the open step running now: its lease does not run out meanwhile. */
  private serviceCalls = 0;

  constructor(
    private readonly host: StepHost,
    clock: Clock,
    lease: LeaseOptions,
  ) {
    this.lease = new StepLease(clock, lease, (stepId, attempt) => this.leaseExpired(stepId, attempt));
  }

  /** How long a claim holds its step. */
  get leaseMs(): number {
    return this.lease.options.leaseMs;
  }

  /** The step ended early (an interrupt): later requests for it are refused with this text. */
  endEarly(stepId: string, why: string): void {
    this.recent.endEarly(stepId, why);
  }

  /** After every transition: a step no longer held by a claim holds no lease. */
  afterTransition(state: AgentState): void {
    if (heldStep(state) === undefined) this.lease.clear();
  }

  /** Claim the claimable step. Only the dispatcher calls this, so a step is claimed once. */
  claim(): StepClaim {
    const entries = this.host.apply(startStep(this.host.state(), this.host.ids.next('step'), this.host.now()));
    const running = this.host.state().turn;
    if (running.phase !== 'running') throw new Error('a claimed step leaves its turn running');
    const step = running.turn.step;
    this.recent.remember(step.id);
    if (step.attempt > 1) this.host.onLease?.('reclaimed', step.id, step.attempt);
    const lease = this.lease.grant(step.id, step.attempt);
    return { agent: this.host.agent, stepId: step.id, turnId: running.turn.id, index: step.index, upToSeq: entries[entries.length - 1]!, lease };
  }

  /** Renew the lease `attempt` holds on the open step; returns it. */
  heartbeat(stepId: string, attempt: number): LeaseView {
    this.checkFence(stepId, attempt);
    if (heldStep(this.host.state())?.id !== stepId) throw new ServiceError('STEP_CONFLICT', `step "${stepId}" is not held by a claim: it has ended`);
    return this.lease.renew(stepId, attempt);
  }

  /** The claim `attempt` holds `stepId` and has not answered it yet: it may publish pieces of its answer. Changes nothing. */
  checkWriting(stepId: string, attempt: number): void {
    this.checkFence(stepId, attempt);
    // Held and still claimed: a step awaiting its calls' results holds its lease, but its answer is in.
    const held = heldStep(this.host.state());
    if (held?.id !== stepId || held.status !== 'claimed') throw new ServiceError('STEP_CONFLICT', `step "${stepId}" is not held by a claim: its answer is in, or it has ended`);
  }

  /** The caller of a claim went away before receiving the step: make it claimable again. */
  release(stepId: string): void {
    this.host.apply(releaseStep(this.host.state(), stepId));
  }

  /** Record the model's output; returns the tool calls now awaiting results and whether the turn ended. */
  recordOutput(stepId: string, attempt: number, content: string | readonly TextBlock[] | undefined, toolCalls: ToolCall[], usage?: TokenUsage, model?: string): { ended: boolean } {
    this.checkFence(stepId, attempt);
    const message: Message = {
      id: this.host.ids.next('message'),
      role: 'assistant',
      content: content === undefined ? [] : textBlocks(content),
      source: { kind: 'model' },
    };
    if (toolCalls.length > 0) message.toolCalls = toolCalls;
    if (usage !== undefined) message.usage = usage;
    if (model !== undefined) message.model = model;
    this.host.apply(recordOutput(this.host.state(), stepId, message, this.host.now()));
    if (this.host.state().turn.phase === 'closing') {
      this.host.apply(closeTurn(this.host.state(), this.host.now()));
      return { ended: true };
    }
    this.lease.renew(stepId, attempt);
    return { ended: false };
  }

  /**
   * Re-open the turn a previous incarnation left open in the log (the process stopped without
   * closing it): `entries` run from its turn-start. Its last step is claimable again (one
   * attempt later); calls still without a result get an error result first.
   */
  reopenTurn(entries: readonly SessionEntry[]): void {
    const open = openTurnFromLog(entries);
    if (open === null) return;
    this.host.apply(reopenTurn(this.host.state(), open));
    const step = open.step;
    if (step === null) return;
    // Its id is this incarnation's to fence from now on: an older attempt is refused (409), not unknown (404).
    this.recent.remember(step.id);
    if (step.status !== 'awaiting') return;
    const rerun = this.host.rerunAfterRestart?.(step.id, unansweredIn(entries, step.awaiting)) ?? new Set<string>();
    this.answerWithStandIns(step.id, 'the service restarted', rerun);
  }

  /** A service-owned tool call of the open step runs until the returned release: its lease holds meanwhile. */
  holdForServiceCall(): () => void {
    this.serviceCalls++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.serviceCalls--;
    };
  }

  /** Record one tool result; `attempt` fences a backend's result (a service-owned one passes none). */
  recordToolResult(stepId: string, toolCallId: string, content: string | readonly TextBlock[], isError: boolean, attempt?: number): void {
    if (attempt === undefined) this.recent.require(stepId, this.host.id);
    else this.checkFence(stepId, attempt);
    const message: Message = { id: this.host.ids.next('message'), role: 'tool', content: textBlocks(content), source: { kind: 'tool' }, toolCallId };
    if (isError) message.isError = true;
    this.host.apply(recordToolResult(this.host.state(), stepId, message, this.host.now()));
  }

  /** Throws unless the step awaits a result for each id, each named once. Changes nothing. */
  checkToolResults(stepId: string, toolCallIds: readonly string[], attempt: number): void {
    this.checkFence(stepId, attempt);
    const turn = this.host.state().turn;
    if (turn.phase !== 'running' || turn.turn.step.id !== stepId || turn.turn.step.status !== 'awaiting') {
      throw new ServiceError('STEP_CONFLICT', `step "${stepId}" is not awaiting tool results`);
    }
    const awaiting = turn.turn.step.awaiting;
    toolCallIds.forEach((callId, i) => {
      if (!awaiting.includes(callId) || toolCallIds.indexOf(callId) !== i) {
        throw new ServiceError('STEP_CONFLICT', `step "${stepId}" is not awaiting a result for tool call "${callId}"`);
      }
    });
  }

  /**
   * A request for `stepId` fenced by `attempt` (X-Step-Attempt; absent means 1) is accepted
   * only from the attempt that holds the step. Changes nothing.
   */
  private checkFence(stepId: string, attempt: number): void {
    this.recent.require(stepId, this.host.id);
    const turn = this.host.state().turn;
    if (turn.phase !== 'running' || turn.turn.step.id !== stepId) return; // the turn machine answers
    const step = turn.turn.step;
    const holder = step.status === 'lapsed' ? step.attempt + 1 : step.attempt;
    if (attempt < holder) throw new ServiceError('STEP_CONFLICT', `the lease of step "${stepId}" expired; attempt ${holder} holds it`);
    if (attempt > step.attempt) throw new ServiceError('STEP_CONFLICT', `step "${stepId}" has no attempt ${attempt}; attempt ${step.attempt} holds it`);
  }

  /**
   * The lease of `attempt` ran out. A claimed step lapses (claimable again, FIFO, one attempt
   * later) unless that was its last attempt, which fails the turn; a step awaiting the
   * backend's results gets an error result for each and the turn goes on.
   */
  private leaseExpired(stepId: string, attempt: number): void {
    const turn = this.host.state().turn;
    if (this.host.disposing() || turn.phase !== 'running' || turn.turn.step.id !== stepId || turn.turn.step.attempt !== attempt) return;
    const step = turn.turn.step;
    if (step.status === 'awaiting' && (this.serviceCalls > 0 || this.host.workersHold?.(stepId) === true)) {
      this.lease.renew(stepId, attempt);
      return;
    }
    this.host.onLease?.('expired', stepId, attempt);
    const max = this.lease.options.maxAttempts;
    if (step.status === 'claimed' && attempt >= max) {
      this.recent.endEarly(stepId, `the lease of step "${stepId}" expired on its last attempt (${attempt}); the turn failed`);
      this.host.failTurn(`step "${stepId}" was claimed ${attempt} times and no claim posted its output before its lease expired (at most ${max} attempts)`);
    } else if (step.status === 'claimed') {
      this.host.apply(lapseStep(this.host.state(), stepId, attempt));
    } else if (step.status === 'awaiting') {
      this.recent.endEarly(stepId, `the lease of step "${stepId}" expired before its tool results arrived; the turn went on without them`);
      this.answerWithStandIns(stepId, `the lease of step "${stepId}" expired`);
    }
  }

  /** Record a stand-in result (standIns) for every call the open step still awaits: the step is then ready. */
  private answerWithStandIns(stepId: string, why: string, except?: ReadonlySet<string>): void {
    for (const message of this.standIns(why)) {
      if (except?.has(message.toolCallId!) === true) continue;
      this.host.apply(recordToolResult(this.host.state(), stepId, message, this.host.now()));
    }
  }

  /**
   * Error results for the calls the open step still awaits, saying why none was recorded: a call
   * that waited on a person was not run; any other may have taken effect.
   */
  standIns(why: string): Message[] {
    return unansweredCalls(this.host.state()).map((toolCallId) => ({
      id: this.host.ids.next('message'),
      role: 'tool',
      content: [
        {
          type: 'text',
          text:
            this.host.waitsOnPerson?.(toolCallId) === true
              ? `Error: ${why} before a person decided on this tool call; it was not run`
              : `Error: ${why} before this tool call's result was recorded; the call may have taken effect`,
        },
      ],
      source: { kind: 'tool' },
      toolCallId,
      isError: true,
    }));
  }
}

/**
 * The calls of a re-opened turn's entries named in `awaiting` (the last step's: a later call
 * replaces an earlier one of the same id), each with whether a tool-started entry names it and
 * its last approval entry. Both are matched by the call's effect key, which names its step: a
 * backend may reuse a call id from one step to the next.
 */
function unansweredIn(entries: readonly SessionEntry[], awaiting: readonly string[]): UnansweredCall[] {
  const started = new Set<string>();
  const calls = new Map<string, ToolCall>();
  const approvals = new Map<string, Approval>();
  for (const entry of entries) {
    if (entry.type === 'tool-started') started.add(entry.effectKey);
    if (entry.type === 'message') for (const call of entry.toolCalls ?? []) calls.set(call.id, call);
    if (entry.type === 'approval') approvals.set(entry.approval.effectKey, entry.approval);
  }
  return awaiting.flatMap((id) => {
    const call = calls.get(id);
    if (call === undefined) return [];
    const key = call.effectKey ?? '';
    const approval = approvals.get(key);
    return [approval === undefined ? { call, started: started.has(key) } : { call, started: started.has(key), approval }];
  });
}

/** The open step `stepId` of the agent still awaits a result for this call. */
export function awaitsCall(agent: LiveAgent, stepId: string, callId: string): boolean {
  const turn = agent.state.turn;
  return turn.phase === 'running' && turn.turn.step.id === stepId && turn.turn.step.awaiting.includes(callId);
}
