/**
 * The built-in model driver: for every live agent whose session header names a model, the
 * service runs the step loop itself. It claims each step as it becomes claimable, sends the
 * step's messages and tools to the chat-completions endpoint, and records the answer through
 * the same step protocol a backend uses: service-owned tool calls run at once, a call to a
 * tool the agent does not have gets an `unknown tool` error result, arguments that are not
 * JSON get an error result without running anything. A request that cannot be completed
 * (after retries, or past the step timeout) ends the turn as failed with the reason in its
 * turn-end entry, and is logged at `warn` with the agent id, the endpoint's HTTP status and
 * its error text (never the API key); disposing the agent aborts its request in flight. A
 * step over the agent's `model.maxContextTokens` is compacted first (compaction.ts).
 */
import type { Logger } from 'pino';
import { ServiceError } from '../domain/errors.js';
import type { ToolCall } from '../domain/message.js';
import { DEFAULT_MAX_STEPS, type ModelSpec } from '../domain/model.js';
import type { ChatMessage, ChatTool } from '../domain/step-render.js';
import { isClaimable } from '../domain/turn-machine.js';
import type { LiveAgent, StepClaim } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { DirectClaimant, StepDispatcher } from '../steps/step-dispatcher.js';
import type { StepProtocol } from '../steps/step-protocol.js';
import type { Compactions } from '../steps/compactions.js';
import { stepObject } from '../steps/rendered-step.js';
import { readArguments } from '../steps/chat-output.js';
import { completeChat, ModelRequestCancelled, ModelRequestError, type ChatAnswer, type RetryPolicy } from './chat-completions.js';
import { compactStep } from './compaction.js';

export interface DriverOptions extends RetryPolicy {
  /** Model requests in flight at once, over all agents. */
  concurrency: number;
  /** Where `apiKeyEnv` names are looked up. */
  env: Readonly<Record<string, string | undefined>>;
  fetch?: typeof fetch;
}

export const DEFAULT_DRIVER_OPTIONS: Omit<DriverOptions, 'env'> = {
  retries: 4,
  backoffMs: 500,
  maxBackoffMs: 8_000,
  timeoutMs: 120_000,
  concurrency: 16,
};

export interface ModelDriverDeps {
  protocol: Pick<StepProtocol, 'renderStep' | 'applyOutput' | 'applyToolResults'>;
  compactions: Pick<Compactions, 'compactLive'>;
  dispatcher: StepDispatcher<LiveAgent, StepClaim>;
  log: SessionLog;
  logger: Logger;
  isDraining: () => boolean;
  /** Counts what the driver did, for /metrics. */
  observe?: (event: DriverEvent) => void;
  /**
   * The operator's model policy, checked again before every request (it may have been
   * tightened since the agent was created, or the key variable unset); returns the model
   * with its URL normalised.
   */
  checkModel: (spec: ModelSpec) => ModelSpec;
}

export type DriverEvent =
  | { kind: 'request'; outcome: 'ok' | 'failed'; attempts: number; seconds: number }
  | { kind: 'tokens'; prompt: number; completion: number };

/** Whether the built-in driver runs this agent's steps: its session header names a model. */
export function drivenByModel(agent: LiveAgent): boolean {
  return agent.header.model !== undefined;
}

export class ModelDriver implements DirectClaimant<LiveAgent> {
  private readonly active = new Map<LiveAgent, AbortController>();
  private readonly slots: Slots;

  constructor(
    private readonly deps: ModelDriverDeps,
    private readonly options: DriverOptions,
  ) {
    this.slots = new Slots(options.concurrency);
  }

  owns(agent: LiveAgent): boolean {
    return drivenByModel(agent);
  }

  offer(agent: LiveAgent): void {
    if (this.active.has(agent)) return; // its loop takes the step once the current one is done
    const control = new AbortController();
    this.active.set(agent, control);
    // Not in this call: offers arrive inside the agent's own transitions.
    queueMicrotask(() => void this.drive(agent, control));
  }

  /** The incarnation stopped, or its turn was interrupted: its request in flight is aborted. */
  release(agent: LiveAgent): void {
    this.active.get(agent)?.abort();
  }

  /** Agents with a loop running (a request in flight or waiting for a slot). */
  get driving(): number {
    return this.active.size;
  }

  private async drive(agent: LiveAgent, control: AbortController): Promise<void> {
    try {
      // The last check and leaving `active` happen in one synchronous span: an offer made
      // while a step was in flight is never lost.
      while (this.mayClaim(agent, control.signal)) {
        const leave = await this.slots.enter(control.signal);
        if (leave === null) return;
        try {
          // A budget that stops the step pauses the agent: raising it offers the step again.
          if (this.mayClaim(agent, control.signal) && !(await this.step(agent, control.signal))) return;
        } finally {
          leave();
        }
      }
    } catch (error) {
      this.deps.logger.error({ err: error, agentId: agent.id }, 'the model driver stopped on an unexpected error');
    } finally {
      if (this.active.get(agent) === control) this.active.delete(agent);
    }
    // A step that became claimable on the way out (say a queued turn admitted after a failed
    // or an interrupted one) is not left waiting: with a new signal, unless the agent is gone.
    // Through the dispatcher, whose gate may stop it.
    if (!agent.disposing && !this.deps.isDraining() && isClaimable(agent.state)) this.deps.dispatcher.offer(agent);
  }

  private mayClaim(agent: LiveAgent, signal: AbortSignal): boolean {
    return !signal.aborted && !agent.disposing && !this.deps.isDraining() && isClaimable(agent.state);
  }

  /** One step of the agent's turn; false when the claim gate stopped it (nothing was claimed). */
  private async step(agent: LiveAgent, signal: AbortSignal): Promise<boolean> {
    const declared = agent.header.model!;
    let model: ModelSpec;
    try {
      model = this.deps.checkModel(declared);
    } catch (error) {
      return this.fail(agent, `the agent's model is no longer permitted: ${error instanceof Error ? error.message : String(error)}`);
    }
    const maxSteps = model.maxSteps ?? DEFAULT_MAX_STEPS;
    const turn = agent.state.turn;
    const index = turn.phase === 'running' ? turn.turn.step.index + 1 : 0;
    if (index >= maxSteps) return this.fail(agent, `the turn made ${maxSteps} model requests (model.maxSteps) without a final answer`);
    const claim = this.deps.dispatcher.claimDirect(agent);
    if (claim === null) return false;
    let answer: ChatAnswer;
    // The service itself holds this claim: its lease is renewed while the requests run (each
    // request's own timeout bounds it), the summarising one included.
    const renew = setInterval(() => {
      try {
        if (onStep(agent, claim)) agent.steps.heartbeat(claim.stepId, claim.lease.attempt);
      } catch {
        // The step ended meanwhile (an interrupt, a disposal): nothing is held any more.
      }
    }, Math.max(1, Math.floor(agent.steps.leaseMs / 3)));
    renew.unref();
    // What a failure ends the turn as: the summarising request's, or the step's own.
    let failed = 'model request failed';
    try {
      let step = stepObject(await this.deps.protocol.renderStep(claim));
      const limit = model.maxContextTokens;
      if (limit !== undefined && step.estimatedTokens > limit) {
        failed = 'compaction request failed';
        step = await compactStep(this.deps, claim, step, limit, (messages) => this.ask(model, messages, [], signal), signal);
        failed = 'model request failed';
      }
      answer = await this.ask(model, step.messages ?? [], step.tools, signal);
    } catch (error) {
      if (error instanceof ModelRequestCancelled || signal.aborted || agent.disposing) return true; // the disposal ended the turn
      // completeChat redacts the key from everything the endpoint said; the request's headers are never logged.
      if (error instanceof ModelRequestError) {
        this.deps.logger.warn({ agentId: agent.id, status: error.status, attempts: error.attempts, error: error.message }, failed);
        return await this.fail(agent, `${failed}: ${error.message}`);
      }
      this.deps.logger.error({ err: error, agentId: agent.id }, `a ${failed} unexpectedly`);
      return await this.fail(agent, `${failed}: an internal error (see the service log)`);
    } finally {
      clearInterval(renew);
    }
    if (!signal.aborted && !agent.disposing) await this.record(agent, claim, answer);
    return true;
  }

  /** One request to the agent's model, counted in the driver's metrics. */
  private async ask(model: ModelSpec, messages: ChatMessage[], tools: ChatTool[], signal: AbortSignal): Promise<ChatAnswer> {
    const started = performance.now();
    const seconds = (): number => (performance.now() - started) / 1000;
    // checkModel found the variable set.
    const apiKey = model.apiKeyEnv === undefined ? undefined : this.options.env[model.apiKeyEnv];
    let answer: ChatAnswer;
    try {
      answer = await completeChat(
        {
          baseUrl: model.baseUrl,
          model: model.model,
          messages,
          tools,
          ...(apiKey === undefined ? {} : { apiKey }),
          ...(model.temperature === undefined ? {} : { temperature: model.temperature }),
        },
        this.options,
        signal,
        this.options.fetch,
      );
    } catch (error) {
      if (!(error instanceof ModelRequestCancelled) && !signal.aborted) {
        const attempts = error instanceof ModelRequestError ? error.attempts : 0;
        this.deps.observe?.({ kind: 'request', outcome: 'failed', attempts, seconds: seconds() });
      }
      throw error;
    }
    this.deps.observe?.({ kind: 'request', outcome: 'ok', attempts: answer.attempts, seconds: seconds() });
    if (answer.usage !== undefined) this.deps.observe?.({ kind: 'tokens', prompt: answer.usage.promptTokens, completion: answer.usage.completionTokens });
    return answer;
  }

  /** Record the answer as the step's output, like a backend would post it. */
  private async record(agent: LiveAgent, claim: StepClaim, answer: ChatAnswer): Promise<void> {
    const calls: ToolCall[] = [];
    const refused = new Map<string, string>();
    const seen = new Set<string>();
    for (const raw of answer.toolCalls) {
      // A call needs an id of its own to be answered: mint one where the model gave none or repeated one.
      const id = raw.id !== undefined && !seen.has(raw.id) && raw.id.length <= 200 ? raw.id : agent.newMessageId();
      seen.add(id);
      const { input, refusal } = readArguments(id, raw.name, raw.arguments);
      if (refusal !== undefined) refused.set(id, refusal);
      calls.push({ id, name: raw.name, input });
    }
    const output = {
      ...(answer.content === null ? {} : { content: answer.content }),
      ...(calls.length === 0 ? {} : { toolCalls: calls }),
      ...(answer.usage === undefined ? {} : { usage: answer.usage }),
    };
    try {
      const result = await this.deps.protocol.applyOutput(agent, claim.stepId, output, claim.lease.attempt, refused);
      // The model has only the service's tools: any other name is answered as unknown (unless
      // a backend answered it meanwhile through POST tool-calls).
      const unanswered = result.awaiting.filter((call) => stillAwaited(agent, claim.stepId, call.id));
      if (unanswered.length > 0 && !agent.disposing) {
        await this.deps.protocol.applyToolResults(
          agent,
          claim.stepId,
          unanswered.map((call) => ({ toolCallId: call.id, content: `Error: unknown tool "${call.name}"`, isError: true })),
          claim.lease.attempt,
        );
      }
    } catch (error) {
      if (agent.disposing) return;
      this.deps.logger.error({ err: error, agentId: agent.id }, 'recording a model answer failed');
      // Only while this step is still the open one: once its output is in, a commit that
      // failed is retried with what follows, and whatever turn is open now is not this one.
      if (!onStep(agent, claim)) return;
      const reason = error instanceof ServiceError ? error.message : 'an internal error (see the service log)';
      await this.fail(agent, `the model's answer could not be recorded: ${reason}`);
    }
  }

  /** End the open turn as failed with this reason, and wait until that is durable; true: the step was dealt with. */
  private async fail(agent: LiveAgent, reason: string): Promise<true> {
    agent.failTurn(reason);
    await this.deps.log.durable(agent.rootId);
    return true;
  }
}

/** The agent's open turn is still on this claimed step. */
function onStep(agent: LiveAgent, claim: StepClaim): boolean {
  const turn = agent.state.turn;
  return turn.phase === 'running' && turn.turn.id === claim.turnId && turn.turn.step.id === claim.stepId;
}

function stillAwaited(agent: LiveAgent, stepId: string, callId: string): boolean {
  const turn = agent.state.turn;
  return turn.phase === 'running' && turn.turn.step.id === stepId && turn.turn.step.awaiting.includes(callId);
}

/** A counting semaphore whose waiters leave when their signal aborts. */
class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(size: number) {
    this.free = Math.max(1, size);
  }

  /** Resolves to the release function once a slot is held, or null if the signal aborted first. */
  enter(signal: AbortSignal): Promise<(() => void) | null> {
    if (signal.aborted) return Promise.resolve(null);
    if (this.free > 0) {
      this.free--;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve) => {
      const grant = (): void => {
        signal.removeEventListener('abort', onAbort);
        resolve(this.releaser());
      };
      const onAbort = (): void => {
        const i = this.waiting.indexOf(grant);
        if (i !== -1) this.waiting.splice(i, 1);
        resolve(null);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(grant);
    });
  }

  private releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.waiting.shift();
      if (next === undefined) this.free++;
      else next();
    };
  }
}
