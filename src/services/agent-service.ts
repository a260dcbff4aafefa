/**
 * The agent service: creates, resumes and disposes agents, routes deliveries, and runs the
 * step protocol (claim, output, tool results) and service-owned tools. It owns the live
 * registry (one LiveAgent per live id) and the drain state. Authority is checked in the same
 * synchronous span as the action it guards; only the failure path awaits (to tell a missing
 * agent from a wrong token).
 */
import type { Logger } from 'pino';
import type { Delivery } from '../domain/agent.js';
import { MESSAGES, ServiceError } from '../domain/errors.js';
import type { Clock, IdSource } from '../domain/ports.js';
import type { TextBlock, ToolCall } from '../domain/message.js';
import { isoTime, SESSION_SCHEMA_VERSION, type SessionEntry, type SessionHeader } from '../domain/session.js';
import { renderMessages, renderTools, type ChatMessage, type ChatTool, type ToolSchema } from '../domain/step-render.js';
import { LiveAgent, type StepClaim } from './live-agent.js';
import type { SessionLog } from './session-log.js';
import { StepDispatcher } from './step-dispatcher.js';
import type { ToolRegistry } from './tool-registry.js';
import { viewOf, type AgentView } from './views.js';

export interface AgentServiceDeps {
  log: SessionLog;
  tools: ToolRegistry;
  clock: Clock;
  ids: IdSource;
  logger: Logger;
}

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
  output?: unknown;
  content: string;
}

export interface OutputResult {
  toolResults: ToolResultView[];
  awaiting: ToolCall[];
  turn: 'open' | 'ended';
}

export interface ListFilter {
  parentId?: string;
  status?: string;
  limit: number;
  cursor?: string;
}

export interface SessionPage {
  header: SessionHeader;
  entries: SessionEntry[];
  nextAfter: number | null;
}

export class AgentService {
  private readonly live = new Map<string, LiveAgent>();
  /** Ids being created or resumed: claimed before the first await so concurrent requests conflict. */
  private readonly reserved = new Set<string>();
  readonly dispatcher: StepDispatcher<LiveAgent, StepClaim>;
  private drainingSince: number | null = null;

  constructor(private readonly deps: AgentServiceDeps) {
    this.dispatcher = new StepDispatcher<LiveAgent, StepClaim>((agent) => agent.claimStep());
  }

  get draining(): boolean {
    return this.drainingSince !== null;
  }

  /** Steps claimed whose output has not arrived: model requests in flight. */
  get stepsInFlight(): number {
    let n = 0;
    for (const agent of this.live.values()) {
      const turn = agent.state.turn;
      if (turn.phase === 'running' && turn.turn.step.status === 'claimed') n++;
    }
    return n;
  }

  get liveCount(): number {
    return this.live.size;
  }

  async createRoot(input: { id?: string; instructions?: string; metadata?: Record<string, unknown> }): Promise<{ agent: AgentView; agentToken: string }> {
    this.admitNewWork();
    const id = input.id ?? this.deps.ids.next('agent');
    this.reserve(id);
    try {
      await this.deps.log.durable();
      if ((await this.deps.log.store.header(id)) !== undefined) {
        throw new ServiceError('AGENT_EXISTS', `a durable session already has the id "${id}"; resume it instead`);
      }
      this.admitNewWork();
      const header: SessionHeader = {
        version: SESSION_SCHEMA_VERSION,
        id,
        createdAt: isoTime(this.deps.clock.now()),
        kind: 'root',
        parentSession: null,
        depth: 0,
        mode: null,
        provider: null,
      };
      if (input.instructions !== undefined) header.instructions = input.instructions;
      if (input.metadata !== undefined) header.metadata = input.metadata;
      this.deps.log.create(header);
      await this.settleOpened(id);
      return this.publish(header);
    } finally {
      this.reserved.delete(id);
    }
  }

  /** Re-open a root whose process stopped (or that was disposed): a new incarnation, a new token. */
  async resumeRoot(id: string): Promise<{ agent: AgentView; agentToken: string }> {
    this.admitNewWork();
    this.reserve(id);
    try {
      await this.deps.log.durable();
      const summary = await this.deps.log.store.header(id);
      if (summary === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
      if (summary.header.kind !== 'root') {
        throw new ServiceError('NOT_RESUMABLE', `subagent "${id}" is resumed by a followup from its parent, not by the operator`);
      }
      const boundary = await this.deps.log.store.lastTurnBoundary(id);
      this.admitNewWork();
      this.deps.log.open(id, summary.lastSeq);
      if (boundary?.type === 'turn-start') {
        // The process stopped with this turn open: close it once, as failed.
        this.deps.log.append(id, { type: 'turn-end', at: isoTime(this.deps.clock.now()), turnId: boundary.turnId, reason: 'failed' });
      }
      await this.settleOpened(id);
      return this.publish(summary.header);
    } finally {
      this.reserved.delete(id);
    }
  }

  /** Dispose a root: cancel its open turn, discard queued work, leave the live registry. */
  async dispose(id: string): Promise<AgentView> {
    const agent = this.requireLive(id);
    agent.dispose();
    const view = viewOf(agent);
    this.live.delete(id);
    this.deps.log.release(id);
    await this.deps.log.durable();
    return view;
  }

  async deliver(id: string, content: string | TextBlock[], delivery: Delivery): Promise<{ messageId: string; inboxItemId?: string }> {
    this.admitNewWork();
    const agent = this.requireLive(id);
    const result = agent.deliver(delivery, content);
    await this.deps.log.durable();
    return result;
  }

  view(id: string): AgentView {
    return viewOf(this.requireLive(id));
  }

  list(filter: ListFilter): { items: AgentView[]; nextCursor: string | null } {
    const after = filter.cursor === undefined ? undefined : decodeCursor(filter.cursor);
    const items = [...this.live.values()]
      .map(viewOf)
      .filter((v) => filter.parentId === undefined || v.parentId === filter.parentId)
      .filter((v) => filter.status === undefined || v.status === filter.status)
      .sort(compareViews)
      .filter((v) => after === undefined || compareViews(v, after) > 0);
    const page = items.slice(0, filter.limit);
    const last = page[page.length - 1];
    const nextCursor = items.length > filter.limit && last !== undefined ? encodeCursor(last) : null;
    return { items: page, nextCursor };
  }

  async sessionPage(id: string, after: number, limit: number): Promise<SessionPage> {
    await this.deps.log.durable();
    const summary = await this.deps.log.store.header(id);
    if (summary === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    const entries = await this.deps.log.store.read(id, after, limit);
    const last = entries[entries.length - 1];
    const more = last !== undefined && last.seq < summary.lastSeq;
    return { header: summary.header, entries, nextAfter: more ? last.seq : null };
  }

  async toolsFor(id: string, token: string | undefined): Promise<ToolSchema[]> {
    const agent = await this.authenticate(id, token);
    return this.deps.tools.listFor(agent);
  }

  /** Claim this agent's next step, waiting up to `waitMs`. Null when none (204). */
  async claimStep(id: string, token: string | undefined, waitMs: number, signal?: AbortSignal): Promise<Step | null> {
    const agent = await this.authenticate(id, token);
    this.admitNewWork();
    const claim = await this.dispatcher.claimOrWait({ agent }, waitMs, signal);
    return claim === null ? null : this.renderStep(claim);
  }

  /** The worker-pool claim: the oldest claimable step of any agent (optionally of one forest). */
  async claimAny(waitMs: number, rootId: string | undefined, signal?: AbortSignal): Promise<{ agentId: string; agentToken: string; step: Step } | null> {
    this.admitNewWork();
    const filter = rootId === undefined ? {} : { rootId };
    const claim = await this.dispatcher.claimOrWait(filter, waitMs, signal);
    if (claim === null) return null;
    const step = await this.renderStep(claim);
    return { agentId: claim.agent.id, agentToken: claim.agent.token, step };
  }

  async postOutput(
    id: string,
    token: string | undefined,
    stepId: string,
    output: { content?: string | TextBlock[]; toolCalls?: ToolCall[] },
  ): Promise<OutputResult> {
    const agent = await this.authenticate(id, token);
    const calls = output.toolCalls ?? [];
    const duplicate = calls.find((c, i) => calls.findIndex((d) => d.id === c.id) !== i);
    if (duplicate !== undefined) throw new ServiceError('VALIDATION', `tool call id "${duplicate.id}" is used twice in one output`);
    const { ended } = agent.recordOutput(stepId, output.content, calls);
    const toolResults: ToolResultView[] = [];
    const awaiting: ToolCall[] = [];
    for (const call of calls) {
      const tool = this.deps.tools.find(agent, call.name);
      if (tool === undefined) {
        awaiting.push(call);
        continue;
      }
      const result = await this.runTool(agent, call, stepId);
      toolResults.push(result);
    }
    await this.deps.log.durable();
    return { toolResults, awaiting, turn: ended ? 'ended' : 'open' };
  }

  async postToolResults(
    id: string,
    token: string | undefined,
    stepId: string,
    results: { toolCallId: string; content: string | TextBlock[]; isError?: boolean }[],
  ): Promise<{ turn: 'open' | 'ended' }> {
    const agent = await this.authenticate(id, token);
    // Validate the whole batch before writing any of it, so a rejected request changes nothing.
    agent.checkToolResults(stepId, results.map((r) => r.toolCallId));
    for (const r of results) agent.recordToolResult(stepId, r.toolCallId, r.content, r.isError === true);
    await this.deps.log.durable();
    return { turn: 'open' };
  }

  /** `POST /v1/agents/{id}/tool-calls`: run one service-owned tool as this agent. */
  async callTool(id: string, token: string | undefined, call: { name: string; input: unknown; toolCallId?: string }): Promise<ToolResultView> {
    const agent = await this.authenticate(id, token);
    const tool = this.deps.tools.require(agent, call.name);
    const toolCallId = call.toolCallId ?? this.deps.ids.next('message');
    const outcome = await tool.execute(call.input, { agent, toolCallId });
    return { toolCallId, name: call.name, isError: false, output: outcome.output, content: outcome.content };
  }

  /** Stop admitting work: readiness fails, open long-polls answer with no step. */
  startDrain(): void {
    if (this.drainingSince !== null) return;
    this.drainingSince = this.deps.clock.now();
    this.dispatcher.release();
  }

  /** Close every live agent's open turn and commit the log. Agents stay resumable. */
  async shutdown(): Promise<void> {
    this.startDrain();
    for (const agent of this.live.values()) agent.dispose();
    this.live.clear();
    await this.deps.log.flush();
  }

  /** Authenticate an agent token: the exact live incarnation, or 404/403. */
  async authenticate(id: string, token: string | undefined): Promise<LiveAgent> {
    const agent = this.live.get(id);
    if (agent !== undefined && agent.authenticates(token)) return agent;
    if (agent === undefined && (await this.deps.log.store.header(id)) === undefined) {
      throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    }
    throw new ServiceError('UNAUTHORIZED', `agent "${id}" requires the token of its live incarnation`);
  }

  private async runTool(agent: LiveAgent, call: ToolCall, stepId: string | undefined): Promise<ToolResultView> {
    const tool = this.deps.tools.require(agent, call.name);
    let result: ToolResultView;
    try {
      const outcome = await tool.execute(call.input, { agent, toolCallId: call.id });
      result = { toolCallId: call.id, name: call.name, isError: false, output: outcome.output, content: outcome.content };
    } catch (error) {
      const message = error instanceof ServiceError ? error.message : 'the tool failed';
      if (!(error instanceof ServiceError)) this.deps.logger.error({ err: error, tool: call.name }, 'service tool failed');
      result = { toolCallId: call.id, name: call.name, isError: true, content: `Error: ${message}` };
    }
    if (stepId !== undefined) agent.recordToolResult(stepId, call.id, result.content, result.isError);
    return result;
  }

  private async renderStep(claim: StepClaim): Promise<Step> {
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

  private requireLive(id: string): LiveAgent {
    const agent = this.live.get(id);
    if (agent === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" is not live`);
    return agent;
  }

  private reserve(id: string): void {
    if (this.live.has(id) || this.reserved.has(id)) {
      throw new ServiceError('AGENT_EXISTS', `agent "${id}" is already live`);
    }
    this.reserved.add(id);
  }

  /** Wait for the opened session's writes; on failure stop tracking it so the id stays usable. */
  private async settleOpened(id: string): Promise<void> {
    try {
      await this.deps.log.durable();
    } catch (error) {
      this.deps.log.release(id);
      throw error;
    }
  }

  private publish(header: SessionHeader): { agent: AgentView; agentToken: string } {
    const agent = new LiveAgent(header, { log: this.deps.log, clock: this.deps.clock, ids: this.deps.ids, dispatcher: this.dispatcher });
    this.live.set(header.id, agent);
    return { agent: viewOf(agent), agentToken: agent.token };
  }

  private admitNewWork(): void {
    if (this.drainingSince !== null) throw new ServiceError('DRAINING', MESSAGES.draining);
  }
}

function compareViews(a: Pick<AgentView, 'createdAt' | 'id'>, b: Pick<AgentView, 'createdAt' | 'id'>): number {
  if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

function encodeCursor(view: AgentView): string {
  return Buffer.from(JSON.stringify({ createdAt: view.createdAt, id: view.id })).toString('base64url');
}

function decodeCursor(cursor: string): { createdAt: string; id: string } {
  try {
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (typeof parsed === 'object' && parsed !== null && 'createdAt' in parsed && 'id' in parsed) {
      const { createdAt, id } = parsed as { createdAt: unknown; id: unknown };
      if (typeof createdAt === 'string' && typeof id === 'string') return { createdAt, id };
    }
  } catch {
    // fall through: a cursor that does not decode is a client error
  }
  throw new ServiceError('VALIDATION', 'cursor is not a cursor this service returned');
}
