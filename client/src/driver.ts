/**
 * runAgent: the step loop of one live agent incarnation, driven with the user's model and tool
 * functions. Claim (long-poll) -> model -> post output -> run the backend's own awaited calls ->
 * post their results -> claim again, turn after turn.
 *
 * Each claim names the previous step (`since`), so the service sends only what is new; the
 * model always gets the whole conversation.
 *
 * Invariants: a claimed step always gets its output posted unless the model throws; every call
 * the service lists as `awaiting` gets exactly one result (a throwing tool becomes an `isError`
 * result); service-owned calls (`toolResults`) are never answered by the driver; every request
 * for a step names the attempt its claim holds (X-Step-Attempt), and the step's lease is renewed
 * while the model and the tools work, so a re-claimed step is answered as its own attempt. The loop stops
 * on `maxTurns`, on abort, or with a StaleAgentTokenError when the service refuses the token
 * (403): the incarnation it belonged to is gone, and only a new driver with the new token can go on.
 */
import {
  AgentforestError,
  asAgent,
  type AgentforestClient,
  type ChatMessage,
  type ChatTool,
  type OutputResult,
  type Step,
} from './index.js';

/** A tool call the model asks for; `input` is the parsed arguments. */
export interface ModelToolCall {
  id: string;
  name: string;
  input: unknown;
}

/** What the model answered: text, tool calls, or both. No tool calls ends the turn. */
export interface ModelReply {
  content?: string;
  toolCalls?: ModelToolCall[];
  /** What the request used (charged to the agent's budgets); `costMicroUsd` when known. */
  usage?: { promptTokens: number; completionTokens: number; totalTokens: number; costMicroUsd?: number };
  /** The model that answered, for the service's prices. */
  model?: string;
}

/**
 * A piece of the answer being written: text, or a part of one tool call (never both). `reset`:
 * the answer is being written again, and what earlier deltas of this step built is void.
 */
export type AnswerDelta = ({ text: string } | { toolCall: { index: number; id?: string; name?: string; argumentsDelta?: string } }) & { reset?: true };

export interface StepContext {
  agentId: string;
  step: Step;
  /** The driver's signal, so a long model call can be cut short. */
  signal?: AbortSignal;
  /**
   * Publish pieces of the answer while the model writes it (`event: delta` on the event
   * streams that ask for deltas); the reply is still what is recorded. Resolves once published.
   */
  publish(deltas: AnswerDelta | AnswerDelta[]): Promise<void>;
}

/**
 * The user's model: the step's chat-completions messages and tools (the service-owned tools,
 * then `toolSchemas`) in, a reply out.
 */
export type ModelFn = (messages: ChatMessage[], tools: ChatTool[], context: StepContext) => ModelReply | Promise<ModelReply>;

export interface ToolContext {
  agentId: string;
  toolCallId: string;
  signal?: AbortSignal;
}

/** One backend tool. The string is the tool result; a throw becomes an `isError` result. */
export type ToolHandler = (input: unknown, context: ToolContext) => Promise<string>;

/** A child's credential from a step output (`spawned` by spawn_subagent, `resumed` by send_message). */
export interface ChildCredential {
  via: 'spawned' | 'resumed';
  agentId: string;
  agentToken: string;
}

export interface RunAgentOptions {
  client: AgentforestClient;
  agentId: string;
  /** The token of the live incarnation to drive (X-Agent-Token). */
  agentToken: string;
  model: ModelFn;
  /** The backend's own tools by name, run for the calls the service lists as `awaiting`. */
  tools?: Record<string, ToolHandler>;
  /** Chat-completions definitions of `tools`, appended to each step's tools for the model. */
  toolSchemas?: ChatTool[];
  /** Stops the loop: cancels an open long-poll at once; see client/README.md for a claimed step. */
  signal?: AbortSignal;
  /** Long-poll of each claim, 0..60000 ms (default 30000). */
  waitMs?: number;
  /** Stop once this many turns have ended (default: run until aborted). */
  maxTurns?: number;
  /**
   * Children's credentials from this agent's outputs. They belong to other agents (this
   * agent's own token never changes), so the driver only hands them on, e.g. to drive them.
   */
  onChild?: (child: ChildCredential) => void;
}

export interface RunSummary {
  /** Turns that ended while this driver ran them. */
  turns: number;
  /** Steps whose output this driver posted. */
  steps: number;
  stoppedBy: 'maxTurns' | 'aborted';
  /** A step left claimed because the model threw after the signal aborted (no lease: it stays open). */
  abandonedStepId?: string;
}

/**
 * The service refused this driver's agent token (403 UNAUTHORIZED): the incarnation is gone
 * (a settled or closed child, a disposed root, an agent resumed with a new token).
 */
export class StaleAgentTokenError extends AgentforestError {
  readonly agentId: string;
  /** What the driver did before the token went stale. */
  readonly summary: Omit<RunSummary, 'stoppedBy'>;

  constructor(agentId: string, what: string, body: unknown, summary: Omit<RunSummary, 'stoppedBy'>) {
    super(what, 403, body);
    this.name = 'StaleAgentTokenError';
    this.message =
      `agent "${agentId}" refused this driver's token (${this.message}); the incarnation it belonged to is gone ` +
      '(settled, closed, disposed or resumed with a new token). Drive it again with its current token.';
    this.agentId = agentId;
    this.summary = summary;
  }
}

const DEFAULT_WAIT_MS = 30_000;
const MAX_WAIT_MS = 60_000;

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Drive one agent's steps until `maxTurns` turns end or `signal` aborts. */
export async function runAgent(options: RunAgentOptions): Promise<RunSummary> {
  const { client, agentId, model, signal } = options;
  const waitMs = options.waitMs ?? DEFAULT_WAIT_MS;
  if (!Number.isInteger(waitMs) || waitMs < 0 || waitMs > MAX_WAIT_MS) throw new RangeError(`waitMs must be an integer in 0..${MAX_WAIT_MS}`);
  const maxTurns = options.maxTurns ?? Number.POSITIVE_INFINITY;
  if (maxTurns !== Number.POSITIVE_INFINITY && (!Number.isInteger(maxTurns) || maxTurns < 0)) throw new RangeError('maxTurns must be a non-negative integer');
  const tools = options.tools ?? {};
  const headers = asAgent(options.agentToken);
  const base = `/v1/agents/${agentId}`;
  const done = { turns: 0, steps: 0 };
  const withSignal = signal === undefined ? {} : { signal };
  // A function, not an inline test: the flag changes across awaits, which narrowing ignores.
  const aborted = (): boolean => signal?.aborted === true;

  const fail = (what: string, status: number, body: unknown): AgentforestError =>
    status === 403 ? new StaleAgentTokenError(agentId, what, body, { ...done }) : new AgentforestError(what, status, body);

  /**
   * The last step's id and whole conversation: the next claim names it (`since`), so the service
   * sends only the messages after it, and the step handed on has the whole list again.
   */
  let held: { stepId: string; messages: ChatMessage[] } | undefined;

  /** The next step (its whole `messages`), or null on 204 (nothing within waitMs) and on abort. */
  const claim = async (): Promise<Step | null> => {
    let answer;
    try {
      answer = await client.POST('/v1/agents/{id}/steps/next', {
        params: { path: { id: agentId } },
        body: held === undefined ? { waitMs } : { waitMs, since: held.stepId },
        headers,
        ...withSignal,
      });
    } catch (error) {
      if (aborted()) return null;
      throw error;
    }
    const { data, error, response } = answer;
    if (response.status === 204) return null;
    if (data === undefined) throw fail(`POST ${base}/steps/next`, response.status, error);
    const { messagesSince, ...step } = data.step;
    const messages = messagesSince === undefined || held === undefined ? (step.messages ?? []) : [...held.messages, ...messagesSince];
    held = { stepId: step.id, messages };
    return { ...step, messages };
  };

  /** A step's requests carry the attempt its claim holds the step under (the fence). */
  const fenced = (step: Step): Record<string, string> => ({ ...headers, 'x-step-attempt': String(step.lease.attempt) });

  /**
   * Renew the step's lease while the model and the tools work, at about a third of the lease
   * length; stops when the returned function is called. A failed renewal is left to the next
   * request for the step, which then says why (an interrupt, an expired lease).
   */
  const keepLease = (step: Step): (() => void) => {
    const every = Math.max(1_000, Math.floor((Date.parse(step.lease.expiresAt) - Date.now()) / 3));
    const timer = setInterval(() => {
      client
        .POST('/v1/agents/{id}/steps/{stepId}/heartbeat', { params: { path: { id: agentId, stepId: step.id } }, headers: fenced(step) })
        .catch(() => undefined);
    }, every);
    timer.unref?.();
    return () => clearInterval(timer);
  };

  const publish = async (step: Step, deltas: AnswerDelta | AnswerDelta[]): Promise<void> => {
    if (Array.isArray(deltas) && deltas.length === 0) return;
    const { error, response } = await client.POST('/v1/agents/{id}/steps/{stepId}/deltas', {
      params: { path: { id: agentId, stepId: step.id } },
      body: deltas,
      headers: fenced(step),
    });
    if (!response.ok) throw fail(`POST ${base}/steps/${step.id}/deltas`, response.status, error);
  };

  const postOutput = async (step: Step, reply: ModelReply): Promise<OutputResult> => {
    const toolCalls = reply.toolCalls ?? [];
    const { data, error, response } = await client.POST('/v1/agents/{id}/steps/{stepId}/output', {
      params: { path: { id: agentId, stepId: step.id } },
      body: {
        ...(reply.content === undefined ? {} : { content: reply.content }),
        ...(toolCalls.length === 0 ? {} : { toolCalls: toolCalls.map(({ id, name, input }) => ({ id, name, input })) }),
        ...(reply.usage === undefined ? {} : { usage: reply.usage }),
        ...(reply.model === undefined ? {} : { model: reply.model }),
      },
      headers: fenced(step),
    });
    if (data === undefined) throw fail(`POST ${base}/steps/${step.id}/output`, response.status, error);
    return data;
  };

  const runTool = async (call: ModelToolCall): Promise<{ toolCallId: string; content: string; isError?: boolean }> => {
    const handler = Object.hasOwn(tools, call.name) ? tools[call.name] : undefined;
    if (handler === undefined) return { toolCallId: call.id, content: `Error: no handler for tool "${call.name}"`, isError: true };
    try {
      return { toolCallId: call.id, content: await handler(call.input, { agentId, toolCallId: call.id, ...withSignal }) };
    } catch (error) {
      return { toolCallId: call.id, content: `Error: ${errorText(error)}`, isError: true };
    }
  };

  const postResults = async (step: Step, awaiting: ModelToolCall[]): Promise<'open' | 'ended'> => {
    const results = await Promise.all(awaiting.map(runTool));
    const { data, error, response } = await client.POST('/v1/agents/{id}/steps/{stepId}/tool-results', {
      params: { path: { id: agentId, stepId: step.id } },
      body: { results },
      headers: fenced(step),
    });
    if (data === undefined) throw fail(`POST ${base}/steps/${step.id}/tool-results`, response.status, error);
    return data.turn;
  };

  for (;;) {
    if (done.turns >= maxTurns) return { ...done, stoppedBy: 'maxTurns' };
    if (aborted()) return { ...done, stoppedBy: 'aborted' };
    const step = await claim();
    if (step === null) continue;

    // Children that calls a person approved started or resumed since the last step.
    for (const child of step.spawned ?? []) options.onChild?.({ via: 'spawned', ...child });
    for (const child of step.resumed ?? []) options.onChild?.({ via: 'resumed', ...child });
    const release = keepLease(step);
    let turn: 'open' | 'ended';
    try {
      let reply: ModelReply;
      try {
        reply = await model(step.messages ?? [], [...step.tools, ...(options.toolSchemas ?? [])], { agentId, step, ...withSignal, publish: (deltas) => publish(step, deltas) });
      } catch (error) {
        if (aborted()) return { ...done, stoppedBy: 'aborted', abandonedStepId: step.id };
        throw error;
      }

      const output = await postOutput(step, reply);
      done.steps++;
      for (const child of output.spawned ?? []) options.onChild?.({ via: 'spawned', ...child });
      for (const child of output.resumed ?? []) options.onChild?.({ via: 'resumed', ...child });

      turn = output.turn;
      if (output.awaiting.length > 0) turn = await postResults(step, output.awaiting);
    } finally {
      release();
    }
    if (turn === 'ended') done.turns++;
  }
}
