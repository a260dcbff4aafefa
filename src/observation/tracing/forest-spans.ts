/**
 * The spans of a forest, following the OpenTelemetry GenAI conventions, made from what the
 * session log appends (turn-start, step-start, messages, turn-end) and from the service-owned
 * tool calls it runs:
 *
 * - `invoke_agent {label or id}`: one turn, from its turn-start to its turn-end (status error
 *   when the turn failed);
 * - `chat {model}`: one model step, child of its turn, from the claim (step-start) to the
 *   output (the assistant message), with its token usage; for an agent the built-in model
 *   driver runs it is a CLIENT span naming the endpoint (`server.address`, `server.port`);
 * - `execute_tool {tool}`: one tool call, child of its turn, from the output that asked for it
 *   to its result (status error and `error.type` when it failed); a service-owned call runs
 *   with its span active, so whatever it delivers is caused by it.
 *
 * Causality: a message queued for an agent remembers the span that queued it (the active one:
 * the tool call that started or messaged a child, or the child's `report`; else the sender's
 * turn; else the span an operator's request named in its `traceparent`), by message id, in memory. The turn that message starts is a child of that span, so
 * a forest reads as one trace; a turn started by reports also links to each report's span.
 *
 * Invariants: everything happens in the synchronous span of the entry it follows; what is
 * kept per agent goes when its turn ends (spans) or when it leaves the registry (the rest);
 * the causes kept are bounded (the oldest go first); no token is ever put on a span.
 */
import { context as otelContext, diag, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Link, type Span, type SpanContext, type Tracer } from '@opentelemetry/api';
import { ServiceError } from '../../domain/errors.js';
import { joinText, type Message, type ToolCall } from '../../domain/message.js';
import type { MessageEntryFields, SessionHeader } from '../../domain/session.js';
import type { InboxEvent, InboxItem } from '../../domain/turn-machine.js';
import type { LiveAgent } from '../../agents/live-agent.js';
import type { RuntimeObserver } from '../runtime-observer.js';
import type { BatchEntry } from '../../sessions/session-store.js';
import { loggableCall } from '../../steps/redaction.js';
import type { ServiceTool, ToolExecution, ToolOutcome } from '../../tools/tool-registry.js';
import { ATTR, OPERATION, OTHER_ERROR } from './attributes.js';
import { chatMessage, finishReason, jsonAttribute } from './span-content.js';
import type { Tracing, TracingDeps, TracingOptions } from './tracing.js';

/** Queued messages whose cause is remembered until their turn starts; past this the oldest go. */
export const MAX_CAUSES = 10_000;

interface Cause {
  span: SpanContext;
  /** Queued by a child's report: the turn links to it too. */
  report: boolean;
}

/** What the traces hold for one live agent. */
interface AgentSpans {
  turn: Span | undefined;
  /** The last turn's span, the parent of a tool call made between turns. */
  lastTurn: SpanContext | undefined;
  chat: Span | undefined;
  /** The model a backend said answered the open step. */
  answeredBy: string | undefined;
  /** Open tool-call spans of the open turn, by call id. */
  tools: Map<string, Span>;
  /** Causes of the messages dequeued for the turn about to start. */
  causes: Cause[];
  /** With content on: the turn's user messages, for gen_ai.input.messages. */
  input: MessageEntryFields[];
}

/** A step's model and, for the built-in driver, its endpoint. */
function endpointOf(header: SessionHeader | undefined): { model?: string; address?: string; port?: number } {
  const spec = header?.model;
  if (spec === undefined) return {};
  try {
    const url = new URL(spec.baseUrl);
    const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
    return { model: spec.model, address: url.hostname, port };
  } catch {
    // A base URL the policy accepted always parses; without one the span just names no endpoint.
    return { model: spec.model };
  }
}

export class ForestSpans implements Tracing, RuntimeObserver {
  readonly observer: RuntimeObserver = this;
  private readonly agents = new Map<string, AgentSpans>();
  private readonly causes = new Map<string, Cause>();
  /** Tool spans whose error.type is already set (by the tool's own failure). */
  private readonly typedErrors = new WeakSet<Span>();
  /** Tool spans of calls the service ran; the others were the backend's. */
  private readonly ranHere = new WeakSet<Span>();

  readonly requestContext = (headers: Readonly<Record<string, string | string[] | undefined>>, next: () => void): void => {
    const caller = propagation.extract(ROOT_CONTEXT, headers);
    if (trace.getSpanContext(caller) === undefined) next();
    else otelContext.with(caller, next);
  };

  constructor(
    private readonly tracer: Tracer,
    private readonly deps: TracingDeps,
    private readonly options: Pick<TracingOptions, 'content'>,
  ) {}

  entryQueued(item: BatchEntry): void {
    // Called inside the transition that appends: a failure here must never reach it.
    try {
      this.follow(item);
    } catch (error) {
      diag.error('agentforest: a span could not be made from a session entry', error);
    }
  }

  inbox(agent: LiveAgent, event: InboxEvent, item: InboxItem): void {
    try {
      this.remember(agent, event, item);
    } catch (error) {
      diag.error('agentforest: the cause of a queued message could not be kept', error);
    }
  }

  private follow(item: BatchEntry): void {
    const entry = item.entry;
    switch (entry.type) {
      case 'turn-start':
        this.startTurn(item.sessionId, entry.turnId);
        break;
      case 'step-start':
        this.startStep(item.sessionId, entry.stepId, entry.index, entry.attempt ?? 1);
        break;
      case 'message':
        this.message(item.sessionId, entry);
        break;
      case 'turn-end':
        this.endTurn(item.sessionId, entry.reason, entry.error);
        break;
      default:
        break;
    }
  }

  private remember(agent: LiveAgent, event: InboxEvent, item: InboxItem): void {
    const id = item.message.id;
    if (event === 'enqueue') {
      const cause = this.causeOf(item.message);
      if (cause === undefined) return;
      if (this.causes.size >= MAX_CAUSES) this.causes.delete(this.causes.keys().next().value!);
      this.causes.set(id, cause);
      return;
    }
    const cause = this.causes.get(id);
    if (cause === undefined) return;
    this.causes.delete(id);
    if (event === 'dequeue') this.of(agent.id).causes.push(cause);
  }

  answeredBy(agent: LiveAgent, model: string | undefined): void {
    const spans = this.agents.get(agent.id);
    if (spans !== undefined && model !== undefined) spans.answeredBy = model;
  }

  async runTool(tool: ServiceTool, call: ToolCall, exec: ToolExecution): Promise<ToolOutcome> {
    const spans = this.of(exec.agent.id);
    // A call of the open step has its span from the output; any other call gets one now.
    const listed = spans.tools.get(call.id);
    const span = listed ?? this.startTool(exec.agent.id, spans, loggableCall(call, exec.agent.token));
    span.setAttribute(ATTR.toolOwner, tool.owner ?? 'service');
    this.ranHere.add(span);
    let outcome: ToolOutcome;
    try {
      outcome = await otelContext.with(trace.setSpan(otelContext.active(), span), () => tool.execute(call.input, exec));
    } catch (error) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof ServiceError ? error.message : 'the tool failed' });
      span.setAttribute(ATTR.errorType, error instanceof ServiceError ? error.code : error instanceof Error ? error.name : OTHER_ERROR);
      this.typedErrors.add(span);
      if (listed === undefined) span.end();
      throw error;
    }
    // A tool that answered with an error result (an MCP server's isError, unreachable, a timeout).
    if (outcome.isError === true) span.setStatus({ code: SpanStatusCode.ERROR, message: 'the tool answered with an error result' });
    if (listed === undefined) {
      if (this.options.content) span.setAttribute(ATTR.toolResult, outcome.content);
      span.end();
    }
    return outcome;
  }

  agentLeft(agent: LiveAgent): void {
    const spans = this.agents.get(agent.id);
    if (spans === undefined) return;
    this.agents.delete(agent.id);
    // A turn is always ended before its agent leaves; this only closes what a lost forest left open.
    for (const span of spans.tools.values()) span.end();
    spans.chat?.end();
    spans.turn?.end();
  }

  private of(id: string): AgentSpans {
    let spans = this.agents.get(id);
    if (spans === undefined) {
      spans = { turn: undefined, lastTurn: undefined, chat: undefined, answeredBy: undefined, tools: new Map(), causes: [], input: [] };
      this.agents.set(id, spans);
    }
    return spans;
  }

  /**
   * What caused a message queued now: the active span (a tool call), else the sender's turn,
   * else the caller's span its request named (`traceparent`): within a forest its own causes
   * come first.
   */
  private causeOf(message: Message): Cause | undefined {
    const report = message.source.kind === 'subagent-report';
    const active = trace.getSpanContext(otelContext.active());
    if (active !== undefined && active.isRemote !== true) return { span: active, report };
    const sender = 'senderSessionId' in message.source ? this.agents.get(message.source.senderSessionId) : undefined;
    const span = sender?.turn?.spanContext() ?? sender?.lastTurn ?? active;
    return span === undefined ? undefined : { span, report };
  }

  private header(id: string): SessionHeader | undefined {
    return this.deps.registry.get(id)?.header;
  }

  private startTurn(id: string, turnId: string): void {
    const spans = this.of(id);
    const header = this.header(id);
    const causes = spans.causes;
    spans.causes = [];
    spans.input = [];
    const parent = causes[0] === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, causes[0].span);
    const links: Link[] = causes.filter((c) => c.report).map((c) => ({ context: c.span, attributes: { [ATTR.linkCause]: 'report' } }));
    const attributes: Attributes = {
      [ATTR.operationName]: OPERATION.invokeAgent,
      [ATTR.agentId]: id,
      [ATTR.conversationId]: id,
      [ATTR.rootId]: header?.rootSession ?? id,
      [ATTR.turnId]: turnId,
    };
    if (header?.label !== undefined) attributes[ATTR.agentName] = header.label;
    if (header?.parentSession !== undefined && header.parentSession !== null) attributes[ATTR.parentId] = header.parentSession;
    spans.turn?.end(); // a turn left open by a transition the log never closed
    spans.turn = this.tracer.startSpan(`${OPERATION.invokeAgent} ${header?.label ?? id}`, { kind: SpanKind.INTERNAL, attributes, links }, parent);
  }

  private startStep(id: string, stepId: string, index: number, attempt: number): void {
    const spans = this.agents.get(id);
    if (spans?.turn === undefined) return;
    spans.chat?.end(); // an earlier attempt whose lease ran out
    spans.answeredBy = undefined;
    const endpoint = endpointOf(this.header(id));
    const attributes: Attributes = {
      [ATTR.operationName]: OPERATION.chat,
      [ATTR.agentId]: id,
      [ATTR.conversationId]: id,
      [ATTR.stepId]: stepId,
      [ATTR.stepIndex]: index,
      [ATTR.stepAttempt]: attempt,
    };
    if (endpoint.model !== undefined) attributes[ATTR.requestModel] = endpoint.model;
    if (endpoint.address !== undefined) {
      attributes[ATTR.providerName] = 'openai';
      attributes[ATTR.serverAddress] = endpoint.address;
      if (endpoint.port !== undefined) attributes[ATTR.serverPort] = endpoint.port;
    }
    const name = endpoint.model === undefined ? OPERATION.chat : `${OPERATION.chat} ${endpoint.model}`;
    const kind = endpoint.address === undefined ? SpanKind.INTERNAL : SpanKind.CLIENT;
    spans.chat = this.tracer.startSpan(name, { kind, attributes }, trace.setSpan(ROOT_CONTEXT, spans.turn));
  }

  private message(id: string, message: MessageEntryFields): void {
    const spans = this.agents.get(id);
    if (spans === undefined) return;
    if (message.role === 'user') {
      if (this.options.content && spans.turn !== undefined) spans.input.push(message);
    } else if (message.role === 'assistant') {
      // Only a step's output: a call made outside a step is logged as an assistant message too, and has its span already.
      if (spans.chat !== undefined) this.endStep(id, spans, spans.chat, message);
    } else if (message.role === 'tool' && message.toolCallId !== undefined) {
      const span = spans.tools.get(message.toolCallId);
      if (span === undefined) return;
      spans.tools.delete(message.toolCallId);
      if (!this.ranHere.has(span)) span.setAttribute(ATTR.toolOwner, 'backend');
      if (this.options.content) span.setAttribute(ATTR.toolResult, joinText(message.content));
      if (message.isError === true && !this.typedErrors.has(span)) {
        span.setStatus({ code: SpanStatusCode.ERROR });
        span.setAttribute(ATTR.errorType, OTHER_ERROR);
      }
      span.end();
    }
  }

  private endStep(id: string, spans: AgentSpans, chat: Span, message: MessageEntryFields): void {
    spans.chat = undefined;
    const model = spans.answeredBy;
    const primary = endpointOf(this.header(id)).model;
    if (model !== undefined && primary === undefined) {
      chat.setAttribute(ATTR.requestModel, model);
      chat.updateName(`${OPERATION.chat} ${model}`);
    } else if (model !== undefined && model !== primary) {
      // The driver's primary failed over: the span says which fallback answered.
      chat.setAttribute(ATTR.responseModel, model);
      chat.setAttribute(ATTR.modelFallback, true);
    }
    if (message.usage !== undefined) {
      chat.setAttribute(ATTR.inputTokens, message.usage.promptTokens);
      chat.setAttribute(ATTR.outputTokens, message.usage.completionTokens);
    }
    const finish = finishReason(message);
    chat.setAttribute(ATTR.finishReasons, [finish]);
    if (this.options.content) chat.setAttribute(ATTR.outputMessages, jsonAttribute([chatMessage(message, finish)]));
    chat.end();
    for (const call of message.toolCalls ?? []) spans.tools.set(call.id, this.startTool(id, spans, call));
  }

  /** A tool-call span under the open turn (or the last one); `call` as the session logs it. */
  private startTool(id: string, spans: AgentSpans, call: ToolCall): Span {
    const attributes: Attributes = {
      [ATTR.operationName]: OPERATION.executeTool,
      [ATTR.agentId]: id,
      [ATTR.toolName]: call.name,
      [ATTR.toolCallId]: call.id,
      [ATTR.toolType]: 'function',
    };
    if (this.options.content) attributes[ATTR.toolArguments] = jsonAttribute(call.input);
    const turn = spans.turn?.spanContext() ?? spans.lastTurn;
    const parent = turn === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, turn);
    return this.tracer.startSpan(`${OPERATION.executeTool} ${call.name}`, { kind: SpanKind.INTERNAL, attributes }, parent);
  }

  private endTurn(id: string, reason: string, error: string | undefined): void {
    const spans = this.agents.get(id);
    const turn = spans?.turn;
    if (spans === undefined || turn === undefined) return;
    // Whatever the turn still holds open ends with it (every awaited call got a result first).
    spans.chat?.setStatus({ code: SpanStatusCode.ERROR, message: `the turn ended (${reason}) before the step's output` });
    spans.chat?.end();
    spans.chat = undefined;
    for (const span of spans.tools.values()) span.end();
    spans.tools.clear();
    turn.setAttribute(ATTR.turnEndReason, reason);
    if (reason === 'failed') {
      turn.setStatus({ code: SpanStatusCode.ERROR, ...(error === undefined ? {} : { message: error }) });
      turn.setAttribute(ATTR.errorType, 'turn_failed');
    }
    if (this.options.content && spans.input.length > 0) turn.setAttribute(ATTR.inputMessages, jsonAttribute(spans.input.map((m) => chatMessage(m))));
    spans.input = [];
    turn.end();
    spans.lastTurn = turn.spanContext();
    spans.turn = undefined;
  }
}
