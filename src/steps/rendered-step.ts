/**
 * A claimed step as the service hands it out: its identity, its messages as JSON text from the
 * step cache (step-cache.ts), its tools and lease. It is sent as bytes, so a long conversation
 * is copied out rather than serialised again; `stepObject` parses it for in-process callers
 * (the built-in model driver).
 */
import type { AgentCredential, Step } from '../contract/index.js';
import type { LeaseView } from './step-lease.js';
import type { RenderedMessages } from './step-cache.js';

export interface RenderedStep {
  id: string;
  turnId: string;
  index: number;
  lease: LeaseView;
  messages: RenderedMessages;
  /** The tools' JSON array text. */
  toolsJson: string;
  estimatedTokens: number;
  /** Children that calls run since the previous step's output (approved ones) started or resumed. */
  credentials?: LateCredentials | undefined;
}

/** Children's credentials that no output's answer carried: they go with the agent's next step. */
export interface LateCredentials {
  spawned: AgentCredential[];
  resumed: AgentCredential[];
}

/** About four bytes of JSON per token: an estimate a backend can decide a compaction by. */
export function estimateTokens(bytes: number): number {
  return Math.ceil(bytes / 4);
}

/**
 * The JSON body `{...outer, "step": <step>}` (the keys of `outer` first), as the wire's Step
 * (`messages`, or `messagesSince` for a delta step), in pieces to send in order: the messages
 * stay the step cache's bytes, not a copy.
 */
export function stepJsonPieces(step: RenderedStep, outer: Record<string, string> = {}): Buffer[] {
  let start = '{';
  for (const [key, value] of Object.entries(outer)) start += `${JSON.stringify(key)}:${JSON.stringify(value)},`;
  const key = step.messages.delta ? 'messagesSince' : 'messages';
  start += `"step":{"id":${JSON.stringify(step.id)},"turnId":${JSON.stringify(step.turnId)},"index":${step.index},"${key}":`;
  const late = step.credentials;
  const credentials =
    late === undefined ? '' : `${late.spawned.length > 0 ? `,"spawned":${JSON.stringify(late.spawned)}` : ''}${late.resumed.length > 0 ? `,"resumed":${JSON.stringify(late.resumed)}` : ''}`;
  const end =
    `,"tools":${step.toolsJson},"lease":${JSON.stringify(step.lease)},` +
    `"estimatedTokens":${step.estimatedTokens}${credentials},"prefixDigest":"${step.messages.mark.digest}"}}`;
  return [Buffer.from(start), ...step.messages.json, Buffer.from(end)];
}

/** The step as an object (parsed from its JSON). */
export function stepObject(step: RenderedStep): Step {
  return (JSON.parse(Buffer.concat(stepJsonPieces(step)).toString('utf8')) as { step: Step }).step;
}
