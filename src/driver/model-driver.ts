/**
 * The built-in model driver: for every live agent whose session header names a model, the
 * service runs the step loop itself. Its workers (`concurrency` of them) take those agents'
 * steps from the dispatcher's driver lane as any worker takes a step, send the
 * step's messages and tools to the chat-completions endpoint, and records the answer through
 * the same step protocol a backend uses: service-owned tool calls run at once, a call to a
 * tool the agent does not have gets an `unknown tool` error result, arguments that are not
 * JSON get an error result without running anything. A request that cannot be completed
 * (after retries, or past the step timeout) ends the turn as failed with the reason in its
 * turn-end entry, and is logged at `warn` with the agent id, the endpoint's HTTP status and
 * its error text (never the API key); disposing the agent aborts its request in flight. A
 * step over the agent's `model.maxContextTokens` is compacted first (compaction.ts).
 */
import { awaitsCall } from '../steps/agent-steps.js';
import type { Logger } from 'pino';
import { ServiceError } from '../domain/errors.js';
import type { ToolCall } from '../domain/message.js';
import { DEFAULT_MAX_STEPS, endpointsOf, type ModelSpec } from '../domain/model.js';
import type { ChatMessage, ChatTool } from '../domain/step-render.js';
import { isClaimable } from '../domain/turn-machine.js';
import type { LiveAgent, StepClaim } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { StepDispatcher } from '../steps/step-dispatcher.js';
import type { StepProtocol } from '../steps/step-protocol.js';
import type { Compactions } from '../steps/compactions.js';
import { stepObject } from '../steps/rendered-step.js';
import { readArguments } from '../steps/chat-output.js';
import { providerOf } from './provider-backoff.js';
import type { ProviderGate, ProviderPlace } from './provider-gate.js';
import { completeChat, DEFAULT_MAX_PROVIDER_BACKOFF_MS, maxWaitOf, ModelRequestCancelled, waitTooLong, ModelRequestError, type AnswerPiece, type AttemptOutcome, type ChatAnswer, type ChatEndpoint, type ChatRequest, type RetryPolicy } from './chat-completions.js';
import { compactStep } from './compaction.js';
import { RateLimited } from './rate-limited.js';

export interface DriverOptions extends RetryPolicy {
  /** Model requests in flight at once, over all agents. */
  concurrency: number;
  /** Where `apiKeyEnv` names are looked up. */
  env: Readonly<Record<string, string | undefined>>;
  /** Ask endpoints to stream their answers (default true). */
  stream?: boolean;
  fetch?: typeof fetch;
}

export const DEFAULT_DRIVER_OPTIONS: Omit<DriverOptions, 'env'> = {
  retries: 4,
  backoffMs: 500,
  maxBackoffMs: 8_000,
  timeoutMs: 120_000,
  maxProviderBackoffMs: DEFAULT_MAX_PROVIDER_BACKOFF_MS,
  concurrency: 16,
  stream: true,
};

export interface ModelDriverDeps {
  protocol: Pick<StepProtocol, 'renderStep' | 'applyOutput' | 'applyToolResults' | 'runByBackend' | 'publishDeltas'>;
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
  checkModel: (spec: ModelSpec, tenantId?: string) => ModelSpec;
  /** What holds a provider (its back-off, its full window), for every agent of the instance and shared with the others. */
  providers: ProviderGate;
}

export type DriverEvent =
  | { kind: 'request'; outcome: 'ok' | 'failed'; attempts: number; seconds: number }
  /** One attempt at one endpoint (`<baseUrl> <model>`), and whether it fell over to the next. */
  | { kind: 'attempt'; provider: string; outcome: AttemptOutcome; fellOver: boolean }
  | { kind: 'tokens'; prompt: number; completion: number }
  /** A provider (`<baseUrl> <model>`) asked to be left alone this long (a 429 or 503 with Retry-After). */
  | { kind: 'backoff'; provider: string; seconds: number }
  /** The first piece of a step's answer arrived this long after its request was sent. */
  | { kind: 'first-delta'; provider: string; seconds: number };

/** Whether the built-in driver runs this agent's steps: its session header names a model. */
export function drivenByModel(agent: LiveAgent): boolean {
  return agent.header.model !== undefined;
}

export class ModelDriver {
  /**
   * Agents whose step a worker holds now (a request in flight, or its answer being recorded),
   * with the place held for it in its provider's window, if that has a request limit.
   */
  private readonly busy = new Map<LiveAgent, ProviderPlace | undefined>();
  /** Providers already said to answer without usage. */
  private readonly usageless = new Set<string>();
  /** Agents whose step waits for a provider's back-off to end or its window to turn. */
  private readonly rateLimited: RateLimited<LiveAgent>;

  constructor(
    private readonly deps: ModelDriverDeps,
    private readonly options: DriverOptions,
  ) {
    this.rateLimited = new RateLimited<LiveAgent>(
      (agent) => {
        if (!agent.disposing && !this.deps.isDraining() && isClaimable(agent.state)) this.deps.dispatcher.offer(agent);
      },
      () => deps.providers.now(),
    );
  }

  /**
   * Start the workers, each of which takes a driven agent's step from the dispatcher, runs it
   * and takes the next; they stop once draining. Requests in flight are thereby bounded by
   * `concurrency`, over all agents.
   */
  start(): void {
    for (let i = 0; i < Math.max(1, this.options.concurrency); i++) void this.work();
  }

  /**
   * The dispatcher's gate on this lane, asked in the span that would claim the step: a step the
   * driver cannot run (its model no longer permitted, or model.maxSteps reached) is not claimed,
   * and its turn ends as failed just after.
   */
  admits(agent: LiveAgent): boolean {
    // One step of an agent at a time: its next is offered again once this one is recorded.
    if (this.busy.has(agent)) return false;
    const permitted = this.permittedModel(agent);
    if ('refusal' in permitted) return this.refuse(agent, permitted.refusal);
    const refusal = stepsRefusal(agent, permitted.model);
    if (refusal !== undefined) return this.refuse(agent, refusal);
    // Every provider of its model held (in back-off, or its window full): the step waits
    // unclaimed, offered again when the first one opens. Else a place in the window of the
    // provider its request goes to is held for it: the last check, so admitted means placed.
    const admitted = this.deps.providers.admit(endpointsOf(permitted.model).map(providerOf));
    if ('until' in admitted) {
      const tooLong = this.waitRefusal(permitted.model, admitted.until);
      if (tooLong !== undefined) return this.refuse(agent, tooLong);
      this.rateLimited.hold(agent, admitted.until);
      return false;
    }
    this.rateLimited.release(agent);
    // Admitted means claimed in this same span: the agent is this driver's until its worker is done.
    this.busy.set(agent, admitted.place);
    return true;
  }

  /** A step the driver cannot run is not claimed; its turn ends as failed just after. */
  private refuse(agent: LiveAgent, reason: string): false {
    queueMicrotask(() => void this.fail(agent, reason).catch((err: unknown) => this.deps.logger.error({ err, agentId: agent.id }, 'failing a turn the driver refused failed')));
    return false;
  }

  /** What holds the agent's step (the agent view's `waiting`), if its providers' limits do (rate-limited.ts). */
  waitingFor(agent: LiveAgent): { reason: 'rate-limited'; until: string } | undefined {
    const until = this.rateLimited.until(agent);
    return until === undefined ? undefined : { reason: 'rate-limited', until: new Date(until).toISOString() };
  }

  /**
   * Why a step whose every provider is held until `until` is not held that long: every one is
   * in a back-off longer than the longest wait allowed (as a request that met it would fail),
   * with what the provider answered. A full window is waited for (it turns within a minute).
   */
  private waitRefusal(model: ModelSpec, until: number): string | undefined {
    const maxWait = maxWaitOf(this.options);
    const waitMs = until - this.deps.providers.now();
    if (waitMs <= maxWait) return undefined;
    const backoffs = endpointsOf(model).map((e) => this.deps.providers.backoffOf(providerOf(e)));
    if (backoffs.some((b) => b === undefined)) return undefined;
    const held = backoffs.find((b) => b?.until === until);
    return `model request failed: ${waitTooLong(held?.answer ?? 'every provider of the model is held', waitMs, maxWait)}`;
  }

  /** Offer again the agents whose provider opened (what the hold's timer does; a test with its own clock calls it). */
  offerDue(): void {
    this.rateLimited.offerDue();
  }

  /** The agent's model as the operator's policy allows it now, or why it no longer does. */
  private permittedModel(agent: LiveAgent): { model: ModelSpec } | { refusal: string } {
    try {
      return { model: this.deps.checkModel(agent.header.model!, agent.tenantId) };
    } catch (error) {
      return { refusal: `the agent's model is no longer permitted: ${error instanceof Error ? error.message : String(error)}` };
    }
  }

  /** Driven agents with a step held by a worker or waiting for one. */
  get driving(): number {
    return this.busy.size + this.deps.dispatcher.drivenWaiting;
  }

  private async work(): Promise<void> {
    while (!this.deps.isDraining()) {
      const claim = await this.deps.dispatcher.claimOrWait({ driven: true }, Infinity);
      if (claim === null) continue; // released: draining, checked above
      const agent = claim.agent; // in `busy` since the gate admitted it
      try {
        await this.step(claim);
      } catch (error) {
        this.deps.logger.error({ err: error, agentId: agent.id }, 'the model driver failed a step on an unexpected error');
      } finally {
        // A place its requests did not take is free again for another step.
        const place = this.busy.get(agent);
        this.busy.delete(agent);
        if (place !== undefined) this.deps.providers.release(place);
      }
      // A step that became claimable meanwhile (the turn's next, or a queued turn's first) was
      // held while this one was recorded: through the dispatcher, whose gates may stop it.
      if (!agent.disposing && !this.deps.isDraining() && isClaimable(agent.state)) this.deps.dispatcher.offer(agent);
    }
  }

  /** One claimed step of an agent's turn, answered or the turn failed. */
  private async step(claim: StepClaim): Promise<void> {
    const agent = claim.agent;
    // Aborted when the turn ends early (an interrupt, a disposal, the agent leaving this instance).
    const signal = agent.turnSignal;
    if (agent.disposing || !onStep(agent, claim)) return;
    // The gate checked the model in the span that claimed the step; the policy may have changed since.
    const checked = this.permittedModel(agent);
    if ('refusal' in checked) return this.fail(agent, checked.refusal);
    const { model } = checked;
    const place = this.busy.get(agent);
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
    const onWait = (waitMs: number | undefined): void => this.rateLimited.waiting(agent, waitMs);
    // What a failure ends the turn as: the summarising request's, or the step's own.
    let failed = 'model request failed';
    try {
      let step = stepObject(await this.deps.protocol.renderStep(claim));
      const limit = model.maxContextTokens;
      if (limit !== undefined && step.estimatedTokens > limit) {
        failed = 'compaction request failed';
        step = await compactStep(this.deps, claim, step, limit, (messages) => this.ask(model, messages, [], signal, { place, onWait }), signal);
        failed = 'model request failed';
      }
      // The answer's pieces go out as deltas while it is written; the recorded output is the whole.
      const onDelta = (piece: AnswerPiece & { reset?: true }): void => {
        if (signal.aborted) return;
        try {
          this.deps.protocol.publishDeltas(agent, claim.stepId, claim.lease.attempt, [piece]);
        } catch (error) {
          // Watching never fails the request being watched.
          this.deps.logger.error({ err: error, agentId: agent.id }, 'publishing a delta failed');
        }
      };
      answer = await this.ask(model, step.messages ?? [], step.tools, signal, { onDelta, place, onWait });
    } catch (error) {
      if (error instanceof ModelRequestCancelled || signal.aborted || agent.disposing) return; // the turn ended meanwhile
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
  }

  /**
   * One request to the agent's model, counted in the driver's metrics. `place`: held for the
   * step in its provider's window, taken by its first request there.
   */
  private async ask(model: ModelSpec, messages: ChatMessage[], tools: ChatTool[], signal: AbortSignal, extra: { onDelta?: ChatRequest['onDelta']; onWait: NonNullable<ChatRequest['onWait']>; place: ProviderPlace | undefined }): Promise<ChatAnswer> {
    const { onDelta, onWait, place } = extra;
    const started = performance.now();
    const seconds = (): number => (performance.now() - started) / 1000;
    // checkModel found every variable set.
    const endpoints = endpointsOf(model).map((e) => {
      const apiKey = e.apiKeyEnv === undefined ? undefined : this.options.env[e.apiKeyEnv];
      return { baseUrl: e.baseUrl, model: e.model, ...(apiKey === undefined ? {} : { apiKey }) };
    });
    let answer: ChatAnswer;
    try {
      answer = await completeChat(
        {
          endpoints,
          providers: this.deps.providers,
          onAttempt: (e, outcome, fellOver) => this.deps.observe?.({ kind: 'attempt', provider: providerOf(e), outcome, fellOver }),
          messages,
          tools,
          stream: this.options.stream !== false,
          onWait,
          ...(place === undefined ? {} : { place }),
          ...(onDelta === undefined ? {} : { onDelta, onFirstDelta: (e: ChatEndpoint, seconds: number) => this.deps.observe?.({ kind: 'first-delta', provider: providerOf(e), seconds }) }),
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
    else this.withoutUsage(answer.provider);
    return answer;
  }

  /**
   * A provider answered without usage (some ignore `stream_options.include_usage`): said once per
   * provider, since nothing then counts its tokens against budgets, quotas or tokensPerMinute.
   */
  private withoutUsage(provider: string): void {
    if (this.usageless.has(provider)) return;
    this.usageless.add(provider);
    this.deps.logger.warn(
      { provider },
      "a model provider answered without usage: its tokens and cost count against no budget, tenant quota or tokensPerMinute (said once per provider)",
    );
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
      // Which model answered (a fallback's, when the primary failed over): the step is priced by it.
      model: answer.model,
      // Empty text is no text (a streamed answer of tool calls only starts with empty content).
      ...(answer.content === null || answer.content === '' ? {} : { content: answer.content }),
      ...(calls.length === 0 ? {} : { toolCalls: calls }),
      ...(answer.usage === undefined ? {} : { usage: answer.usage }),
    };
    try {
      const result = await this.deps.protocol.applyOutput(agent, claim.stepId, output, claim.lease.attempt, refused);
      // The model has only the service's tools: any other name is answered as unknown (unless
      // a backend answered it meanwhile through POST tool-calls).
      // A call of a declared backend tool waits for a worker's result (the tool pool).
      const unanswered = result.awaiting.filter((call) => awaitsCall(agent, claim.stepId, call.id) && !this.deps.protocol.runByBackend(agent, call.name));
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

  /** End the open turn as failed with this reason, and wait until that is durable. */
  private async fail(agent: LiveAgent, reason: string): Promise<void> {
    agent.failTurn(reason);
    await this.deps.log.durable(agent.rootId);
  }
}

/** Why the agent's next step cannot run under its model: its turn reached maxSteps. */
function stepsRefusal(agent: LiveAgent, model: ModelSpec): string | undefined {
  const maxSteps = model.maxSteps ?? DEFAULT_MAX_STEPS;
  const turn = agent.state.turn;
  const index = turn.phase === 'running' ? turn.turn.step.index + 1 : 0;
  return index >= maxSteps ? `the turn made ${maxSteps} model requests (model.maxSteps) without a final answer` : undefined;
}

/** The agent's open turn is still on this claimed step. */
function onStep(agent: LiveAgent, claim: StepClaim): boolean {
  const turn = agent.state.turn;
  return turn.phase === 'running' && turn.turn.id === claim.turnId && turn.turn.step.id === claim.stepId;
}

