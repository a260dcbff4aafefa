/**
 * A turn re-opened from the log (after a restart, a failover, a stop) whose last step still
 * awaits results: what becomes of each call without one (see StepHost.rerunAfterRestart).
 *
 * - A call a person was asked about waits again, or is acted on if decided meanwhile
 *   (approvals.ts); one approved and started before the stop goes on as any started call.
 * - A call with no approval entry that a rule now asks about (its entry lost with a stop, or a
 *   rule added since) is asked about again; one a rule denies gets the denial.
 * - A call of a declared backend tool is offered to the workers again, under the same key.
 * - A call whose tool says so is taken: run again with its effect key, or answered as of
 *   unknown outcome when it had started and its tool may not be run twice.
 */
import { notAllowedText } from '../domain/approvals.js';
import { ServiceError } from '../domain/errors.js';
import type { ToolCall } from '../domain/message.js';
import type { Approvals, KeyedCall } from '../approvals/approvals.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { ToolPool } from '../tools/backend/tool-pool.js';
import { failedCall, type ToolCalls } from '../tools/tool-calls.js';
import type { ServiceTool, ToolRegistry } from '../tools/tool-registry.js';
import { awaitsCall, type UnansweredCall } from './agent-steps.js';
import type { CallRules } from '../approvals/call-rules.js';

export interface ReopenedCallsDeps {
  tools: Pick<ToolRegistry, 'find'>;
  calls: Pick<ToolCalls, 'run'>;
  log: Pick<SessionLog, 'durable'>;
  pool: Pick<ToolPool, 'offer'>;
  rules: Pick<CallRules, 'ruleFor'>;
  approvals: Pick<Approvals, 'ask' | 'reopened'>;
}

export class ReopenedCalls {
  constructor(private readonly deps: ReopenedCallsDeps) {}

  /** Take the calls this module answers for; returns their ids (the others keep waiting). */
  take(agent: LiveAgent, stepId: string, unanswered: readonly UnansweredCall[]): ReadonlySet<string> {
    const forWorkers: KeyedCall[] = [];
    const taken: { call: ToolCall; tool: ServiceTool; unknown: boolean }[] = [];
    const decided: string[] = [];
    for (const { call, started, approval } of unanswered) {
      if (approval !== undefined && call.effectKey !== undefined && !(approval.state === 'approved' && started)) {
        if (this.deps.approvals.reopened(agent, stepId, call as KeyedCall, approval)) {
          decided.push(call.id);
          continue;
        }
      }
      const rule = approval === undefined && !started && call.effectKey !== undefined ? this.deps.rules.ruleFor(agent, call.name) : 'allow';
      if (rule !== 'allow') {
        this.ruleAgain(agent, stepId, call as KeyedCall, rule);
        decided.push(call.id);
        continue;
      }
      const tool = this.deps.tools.find(agent, call.name);
      if (tool?.owner === 'backend' && call.effectKey !== undefined) forWorkers.push(call as KeyedCall);
      else if (tool?.afterRestart !== undefined) taken.push({ call, tool, unknown: started && tool.afterRestart === 'unknown' });
    }
    queueMicrotask(() => forWorkers.forEach((call) => this.deps.pool.offer(agent, stepId, call)));
    const offered = [...decided, ...forWorkers.map((call) => call.id)];
    if (taken.length > 0) this.runAgain(agent, stepId, taken);
    return new Set([...offered, ...taken.map(({ call }) => call.id)]);
  }

  /** Once the agent is published: ask about the call again, or deny it. */
  private ruleAgain(agent: LiveAgent, stepId: string, call: KeyedCall, rule: 'ask' | 'deny'): void {
    queueMicrotask(() => {
      if (!awaitsCall(agent, stepId, call.id)) return;
      if (rule === 'ask') this.deps.approvals.ask(agent, stepId, call);
      else agent.steps.recordToolResult(stepId, call.id, notAllowedText(call.name), true);
      void this.deps.log.durable(agent.rootId).catch(() => undefined);
    });
  }

  private runAgain(agent: LiveAgent, stepId: string, taken: readonly { call: ToolCall; tool: ServiceTool; unknown: boolean }[]): void {
    const signal = agent.turnSignal;
    const hold = agent.steps.holdForServiceCall();
    const run = async (): Promise<void> => {
      try {
        const outcomes = taken.map(({ call, tool, unknown }) =>
          unknown ? Promise.resolve(failedCall(call, new ServiceError('INTERNAL', 'the outcome of this call is unknown after a restart'))) : this.deps.calls.run(agent, tool, call, signal),
        );
        for (const [i, outcome] of outcomes.entries()) {
          const done = await outcome;
          if (signal.aborted) return;
          agent.steps.recordToolResult(stepId, taken[i]!.call.id, done.result.content, done.result.isError);
        }
        await this.deps.log.durable(agent.rootId);
      } finally {
        hold();
      }
    };
    // After the span that re-opens the turn: the calls run once the agent is published.
    queueMicrotask(() => void run().catch((error: unknown) => agent.failTurn(`re-running tool calls after a restart failed: ${String(error)}`)));
  }
}
