/**
 * Approvals: a person in the loop of a tool call. An operator's rules say, per tool (a name, or
 * a prefix ending in `*`) and optionally per forest, whether a call is allowed, denied or needs
 * a person's decision. A call that needs one is not executed: an approval is recorded with the
 * call and waits in the inbox until a person approves or denies it, it expires, or the agent's
 * turn ends without it (cancelled).
 *
 * Which rule decides: a forest's rule over a global one, then an exact name over a wildcard,
 * then a longer prefix over a shorter. Among equally specific rules the most cautious wins
 * (deny, then ask, then allow). No rule: allow.
 *
 * A rule made with a tenant's key (or remembered from a decision on its agent's call) is that
 * tenant's: it applies to its agents only. A rule made by an admin applies to every agent. Who
 * made a rule does not change which one decides among those that apply.
 */
import { ServiceError } from './errors.js';
import { GRANT_PATTERN, grantAllows } from './grants.js';

export const RULE_DECISIONS = ['ask', 'allow', 'deny'] as const;
export type RuleDecision = (typeof RULE_DECISIONS)[number];

export const APPROVAL_STATES = ['pending', 'approved', 'denied', 'expired', 'cancelled'] as const;
export type ApprovalState = (typeof APPROVAL_STATES)[number];

export const DECISIONS = ['approve', 'deny'] as const;
export type Decision = (typeof DECISIONS)[number];

/** What a decision adds as a rule: nothing (`once`), one for the forest, or a global one. */
export const REMEMBER = ['once', 'forest', 'always'] as const;
export type Remember = (typeof REMEMBER)[number];

/** A rule id, as a path segment. */
export const RULE_ID_PATTERN = '^[A-Za-z0-9_.:-]{1,128}$';
/** A rule's tool: a tool name, or a prefix ending in `*`, written as a grant is. */
export const RULE_TOOL_PATTERN = GRANT_PATTERN;

export interface ApprovalRule {
  id: string;
  tool: string;
  rootId?: string;
  decision: RuleDecision;
  /** The tenant whose rule it is; absent: global, an admin's. */
  tenantId?: string;
}

export interface Approval {
  id: string;
  state: ApprovalState;
  rootId: string;
  agentId: string;
  /** The forest's agents from the root down to the one that asked. */
  path: string[];
  stepId: string;
  toolCallId: string;
  tool: string;
  input: unknown;
  effectKey: string;
  requestedAt: string;
  expiresAt: string;
  decidedAt?: string;
  reason?: string;
  /** What the decision added as a rule; absent for `once`. */
  remember?: Exclude<Remember, 'once'>;
}

const CAUTION: Readonly<Record<RuleDecision, number>> = { deny: 2, ask: 1, allow: 0 };

/** How specific a matching rule is: forest over global, exact over wildcard, longer prefix over shorter. */
function specificity(rule: ApprovalRule): [number, number, number] {
  const exact = rule.tool.endsWith('*') ? 0 : 1;
  return [rule.rootId === undefined ? 0 : 1, exact, rule.tool.length];
}

/**
 * The rule that decides a call of `tool` in forest `rootId` of tenant `tenantId` (undefined:
 * an agent made with an admin key, which only global rules apply to), if any applies.
 *
 * The global rules (an admin's) and the tenant's own are each ranked as above; a tenant's rule
 * decides only where it is more cautious than the global one that applies: a tenant narrows
 * what the admin allows, never widens it.
 */
export function decidingRule(rules: Iterable<ApprovalRule>, tool: string, rootId: string, tenantId?: string): ApprovalRule | undefined {
  let global: ApprovalRule | undefined;
  let own: ApprovalRule | undefined;
  for (const rule of rules) {
    if (!grantAllows(rule.tool, tool) || (rule.rootId !== undefined && rule.rootId !== rootId)) continue;
    if (rule.tenantId === undefined) {
      if (global === undefined || outranks(rule, global)) global = rule;
    } else if (rule.tenantId === tenantId && (own === undefined || outranks(rule, own))) {
      own = rule;
    }
  }
  if (own === undefined || global === undefined) return own ?? global;
  return CAUTION[own.decision] > CAUTION[global.decision] ? own : global;
}

function outranks(a: ApprovalRule, b: ApprovalRule): boolean {
  const [sa, sb] = [specificity(a), specificity(b)];
  for (let i = 0; i < sa.length; i++) if (sa[i] !== sb[i]) return sa[i]! > sb[i]!;
  return CAUTION[a.decision] > CAUTION[b.decision];
}

/** The approvals whose last entry among `entries` is still pending, in the order they were asked. */
export function stillPending(entries: readonly ({ type: string } | { type: 'approval'; approval: Approval })[]): Approval[] {
  const last = new Map<string, Approval>();
  for (const entry of entries) if (entry.type === 'approval' && 'approval' in entry) last.set(entry.approval.id, entry.approval);
  return [...last.values()].filter((a) => a.state === 'pending');
}

/** The tool result of a call a rule denies. */
export function notAllowedText(tool: string): string {
  return `Error: the call to ${tool} is not allowed here`;
}

/** The tool result of a call outside a step (POST tool-calls) that a rule asks a person about: only a step can wait. */
export function needsStepText(tool: string): string {
  return `Error: the call to ${tool} needs a person's approval, which only a step's tool call can wait for`;
}

/** The tool result of a call a person denied. */
export function deniedText(tool: string, reason: string | undefined): string {
  return `Error: a person denied the call to ${tool}${reason === undefined || reason === '' ? '' : `: ${reason}`}`;
}

/** The tool result of a call no one decided on in time. */
export function expiredText(tool: string): string {
  return `Error: no one decided on the call to ${tool} in time`;
}

/** The state a decision moves an approval to. */
export function stateOf(decision: Decision): ApprovalState {
  return decision === 'approve' ? 'approved' : 'denied';
}

/** What a person's decision says besides approve or deny. */
export interface DecisionNote {
  reason?: string | undefined;
  remember?: Remember | undefined;
}

/** The approval as it ends at `at`, in `state`, with what the decision said. */
export function endedAs(approval: Approval, state: ApprovalState, at: string, note?: DecisionNote): Approval {
  const ended: Approval = { ...approval, state, decidedAt: at };
  if (note?.reason !== undefined) ended.reason = note.reason;
  if (note?.remember === 'forest' || note?.remember === 'always') ended.remember = note.remember;
  return ended;
}

/** As the API shows it at `now`: a pending approval past its time is expired (its agent writes so when next live). */
export function presented(approval: Approval, now: string): Approval {
  return approval.state === 'pending' && approval.expiresAt <= now ? { ...approval, state: 'expired' } : approval;
}

/** A decision on an approval that is no longer pending: the same one again is answered as it is, any other refused. */
export function settledAnswer(current: Approval, decision: Decision): Approval {
  if (current.state === stateOf(decision)) return current;
  throw new ServiceError('APPROVAL_DECIDED', `approval "${current.id}" is already ${current.state}`);
}
