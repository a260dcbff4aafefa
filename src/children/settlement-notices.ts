/**
 * Settlement notices (package `subagent-report`, option `settlementNotices`): when a continuable
 * child's turn ends, its live direct parent gets one quiet context message saying so — for
 * failed turns only (`failures`) or for every turn end (`all`); `off` sends none.
 *
 * - A notice is context, never a report and never a turn: an `inject`, appended at once to an
 *   idle parent and staged for a running one (written at its next step start or turn end). It
 *   goes through no report metric or observer, and it never wakes the parent.
 * - Its content is `Background subagent <childId> turn <reason>:` and, for a failed turn whose
 *   turn-end names an error, a second text block with that error; its source is
 *   `{kind: 'subagent-notice', senderSessionId: <childId>}`.
 * - The recipient is the child's direct parent from durable lineage. A parent that is not live,
 *   is being disposed, or has no room (AGENT_BUSY) gets nothing, silently: the child's own
 *   session keeps the turn end. While the service drains (a shutdown ends open turns as
 *   cancelled) no notice is sent, as no report would be accepted then.
 * - The mode is read at each turn end, so a change applies at once; it is `off` while the
 *   package is uninstalled.
 *
 * It runs in the transition that wrote the child's turn-end (the `turn-ended` service event),
 * so the notice is accepted in the same synchronous span. It never throws into that
 * transition: anything unexpected is logged and the notice dropped.
 */
import type { Logger } from 'pino';
import { ServiceError } from '../domain/errors.js';
import type { MessageSource, TextBlock } from '../domain/message.js';
import type { SettlementNoticeMode } from '../domain/packages.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { LiveAgent, TurnEndBody } from '../agents/live-agent.js';

export interface SettlementNoticeDeps {
  registry: AgentRegistry;
  logger: Logger;
  /** The mode in force now (`off` while the package is not installed). */
  mode: () => SettlementNoticeMode;
  isDraining: () => boolean;
}

export class SettlementNotices {
  constructor(private readonly deps: SettlementNoticeDeps) {}

  /** A live agent's turn ended with `end`: tell its parent when the mode asks for it. */
  onTurnEnd(agent: LiveAgent, end: TurnEndBody): void {
    if (!noticeWanted(this.deps.mode(), end)) return;
    if (agent.header.kind !== 'child' || agent.header.mode !== 'continuable') return;
    if (this.deps.isDraining()) return;
    const parentId = agent.header.parentSession;
    const parent = parentId === null ? undefined : this.deps.registry.get(parentId);
    if (parent === undefined || parent.disposing) return;
    const source: MessageSource = { kind: 'subagent-notice', senderSessionId: agent.id };
    try {
      parent.deliver('inject', noticeContent(agent.id, end), source);
    } catch (error) {
      // No room in the parent: a notice is never worth refusing the parent's own work for.
      if (error instanceof ServiceError && error.code === 'AGENT_BUSY') return;
      this.deps.logger.warn({ err: error, agentId: agent.id, parentId }, 'a settlement notice was not delivered');
    }
  }
}

/** Whether `mode` sends a notice for this turn end. */
export function noticeWanted(mode: SettlementNoticeMode, end: TurnEndBody): boolean {
  return mode === 'all' || (mode === 'failures' && end.reason === 'failed');
}

/** The notice's text blocks: the frame, then the error of a failed turn when it has one. */
export function noticeContent(childId: string, end: TurnEndBody): TextBlock[] {
  const content: TextBlock[] = [{ type: 'text', text: `Background subagent ${childId} turn ${end.reason}:` }];
  if (end.reason === 'failed' && end.error !== undefined) content.push({ type: 'text', text: end.error });
  return content;
}
