/**
 * The built-in driver compacts on its own: when a step it holds is estimated at more than the
 * agent's `model.maxContextTokens`, it first asks the same model to summarise the older part of
 * the conversation, writes that summary as a compaction entry inside the step (the rules are
 * domain/compaction.ts) and sends the step re-rendered from it.
 *
 * What is summarised: the entries after the previous compaction up to a `throughSeq` chosen so
 * that the recent part kept verbatim takes about half of the budget, with the current turn's
 * prompt kept when it can be, and never between a tool call and its result.
 */
import { Buffer } from 'node:buffer';
import type { Logger } from 'pino';
import type { Step } from '../contract/index.js';
import type { SessionEntry } from '../domain/session.js';
import { headMessages, renderEntry, type ChatMessage } from '../domain/step-render.js';
import type { StepClaim } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { StepProtocol } from '../steps/step-protocol.js';
import type { Compactions } from '../steps/compactions.js';
import { stepObject } from '../steps/rendered-step.js';
import { estimateTokens } from '../steps/rendered-step.js';
import { ModelRequestCancelled, ModelRequestError, type ChatAnswer } from './chat-completions.js';

/** The last message of a summarising request: what the summary is for. */
export const COMPACTION_PROMPT =
  'The conversation above is about to be replaced by a summary: from now on you will see only that summary and the messages that follow it. ' +
  'Write that summary now. Be concise, but keep everything needed to continue the work without the original messages: ' +
  'the facts learned, the decisions taken and why, the tasks still open and what was asked for, ' +
  'and the exact names, ids, numbers, paths and other values that later steps may need. ' +
  'Answer with the summary only.';

/** As for `POST /v1/agents/{id}/compactions`: the longest summary a compaction entry takes. */
export const MAX_SUMMARY_CHARS = 1_000_000;

export interface CompactionDeps {
  protocol: Pick<StepProtocol, 'renderStep'>;
  compactions: Pick<Compactions, 'compactLive'>;
  log: Pick<SessionLog, 'lastCompaction' | 'read'>;
  logger: Logger;
}

/** A summarising request: its messages, and where the compaction it yields will end. */
export interface CompactionPlan {
  throughSeq: number;
  messages: ChatMessage[];
}

/**
 * The step to send for `claim` when `step` is over `maxContextTokens`: re-rendered from a new
 * compaction, or `step` itself when nothing before it can be compacted. `summarise` sends one
 * request to the agent's model (no tools); its errors, and a missing summary, are thrown.
 */
export async function compactStep(
  deps: CompactionDeps,
  claim: StepClaim,
  step: Step,
  maxContextTokens: number,
  summarise: (messages: ChatMessage[]) => Promise<ChatAnswer>,
  signal: AbortSignal,
): Promise<Step> {
  const agent = claim.agent;
  const toolsTokens = estimateTokens(Buffer.byteLength(JSON.stringify(step.tools)));
  const plan = await planCompaction(deps.log, agent.id, agent.header.instructions, claim.upToSeq, maxContextTokens, toolsTokens);
  if (plan === undefined) {
    deps.logger.warn(
      { agentId: agent.id, stepId: claim.stepId, estimatedTokens: step.estimatedTokens, maxContextTokens },
      'the step is over model.maxContextTokens but nothing before it can be compacted; it is sent as it is',
    );
    return step;
  }
  const answer = await summarise(plan.messages);
  const summary = answer.content ?? '';
  if (summary.trim() === '') throw new ModelRequestError('the model answered with no summary', answer.attempts);
  if (summary.length > MAX_SUMMARY_CHARS) throw new ModelRequestError(`the summary is longer than ${MAX_SUMMARY_CHARS} characters`, answer.attempts);
  // An interrupt or a disposal during the request: the step is no longer this driver's.
  if (signal.aborted || agent.disposing) throw new ModelRequestCancelled('the step ended during its compaction');
  const entry = await deps.compactions.compactLive(agent, { summary, throughSeq: plan.throughSeq, usage: answer.usage }, claim.stepId);
  // The same claim, cut at the compaction: its messages start from the summary.
  return stepObject(await deps.protocol.renderStep({ ...claim, upToSeq: entry.seq }));
}

/**
 * What to summarise for a step cut at `upToSeq`: the entries after the latest compaction, up
 * to a `throughSeq` chosen by chooseThroughSeq; undefined when there is nothing to compact.
 */
export async function planCompaction(
  log: CompactionDeps['log'],
  id: string,
  instructions: string | undefined,
  upToSeq: number,
  maxContextTokens: number,
  toolsTokens: number,
): Promise<CompactionPlan | undefined> {
  const previous = await log.lastCompaction(id, upToSeq);
  const after = previous?.throughSeq ?? 0;
  const entries = await log.read(id, after, upToSeq - after);
  const throughSeq = chooseThroughSeq(entries, {
    keepTokens: Math.floor(maxContextTokens / 2),
    promptTokens: maxContextTokens - toolsTokens,
  });
  if (throughSeq === undefined) return undefined;
  // The summary replaces the previous one too: the request starts with the step's head.
  const messages = headMessages(instructions, previous?.summary);
  for (const entry of entries) {
    if (entry.seq > throughSeq) break;
    const message = renderEntry(entry);
    if (message !== undefined) messages.push(message);
  }
  messages.push({ role: 'user', content: COMPACTION_PROMPT });
  return { throughSeq, messages };
}

export interface KeepBudget {
  /** The recent messages kept verbatim take at most this (their JSON bytes / 4). */
  keepTokens: number;
  /** The current turn's prompt is kept too, unless the part from it on would take more than this. */
  promptTokens: number;
}

interface Rendered {
  seq: number;
  bytes: number;
  role: ChatMessage['role'];
  calls: string[];
}

/**
 * The `throughSeq` for a compaction of `entries` (the log after the previous compaction's
 * `throughSeq`, in seq order): the seq just before the recent part kept. That part is the
 * longest run of the last messages within `keepTokens`; it reaches back to the current turn's
 * prompt (the last user message) when the part from the prompt on fits `promptTokens` and
 * something before it remains to be summarised. `throughSeq` then moves earlier until no tool
 * call at or before it has its result after it. Undefined when no message would be summarised.
 */
export function chooseThroughSeq(entries: readonly SessionEntry[], budget: KeepBudget): number | undefined {
  const rendered: Rendered[] = [];
  const resultAt = new Map<string, number>();
  for (const entry of entries) {
    const message = renderEntry(entry);
    if (message === undefined) continue;
    const calls = message.role === 'assistant' ? (message.tool_calls ?? []).map((c) => c.id) : [];
    rendered.push({ seq: entry.seq, bytes: Buffer.byteLength(JSON.stringify(message)), role: message.role, calls });
    if (message.role === 'tool') resultAt.set(message.tool_call_id, Math.max(entry.seq, resultAt.get(message.tool_call_id) ?? 0));
  }
  if (rendered.length === 0) return undefined;
  const lastSeq = entries[entries.length - 1]!.seq;
  // suffix[i]: the bytes of the messages from i on.
  const suffix = new Array<number>(rendered.length + 1).fill(0);
  for (let i = rendered.length - 1; i >= 0; i--) suffix[i] = suffix[i + 1]! + rendered[i]!.bytes;
  const tokensFrom = (start: number): number => estimateTokens(suffix[start]!);

  let kept = rendered.length;
  while (kept > 0 && tokensFrom(kept - 1) <= budget.keepTokens) kept--;
  const prompt = rendered.map((r) => r.role).lastIndexOf('user');
  const starts = prompt !== -1 && prompt < kept && tokensFrom(prompt) <= budget.promptTokens ? [prompt, kept] : [kept];
  for (const start of starts) {
    const through = beforeCalls(rendered, resultAt, start === rendered.length ? lastSeq : rendered[start]!.seq - 1);
    // Every message here lies after the previous compaction: one summarised means `through` is past it.
    if (rendered[0]!.seq <= through) return through;
  }
  return undefined;
}

/** `through`, moved earlier until every tool call at or before it has its results at or before it too. */
function beforeCalls(rendered: readonly Rendered[], resultAt: ReadonlyMap<string, number>, through: number): number {
  for (;;) {
    const split = rendered.find((r) => r.seq <= through && r.calls.some((id) => (resultAt.get(id) ?? Number.POSITIVE_INFINITY) > through));
    if (split === undefined) return through;
    through = split.seq - 1;
  }
}
