/**
 * Writing compaction entries (the rules are domain/compaction.ts): a backend's
 * `POST /v1/agents/{id}/compactions`, and the built-in model driver's own.
 *
 * - A live agent's compaction needs its token. The validating reads come first; then, in one
 *   synchronous span, the agent and the rules are checked again and the entry is appended.
 * - A session that is not resident (a settled child, a root not resumed since a restart) has no
 *   token to check: the operator's call writes it through stored-sessions.ts.
 * - Compactions of one agent run one at a time.
 */
import type { TokenUsage } from '../domain/model.js';
import { ServiceError } from '../domain/errors.js';
import { checkBetweenSteps, checkThrough, unansweredIn } from '../domain/compaction.js';
import type { Clock } from '../domain/ports.js';
import type { CompactionEntry, EntryBody, SessionHeader } from '../domain/session.js';
import type { AgentAuthority } from '../agents/authority.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { ChildLock } from '../children/child-lock.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { StoredSessions } from '../sessions/stored-sessions.js';

export interface CompactionInput {
  summary: string;
  /** The last seq the summary stands for; absent: the session's last entry. */
  throughSeq?: number | undefined;
  usage?: TokenUsage | undefined;
}

export interface CompactionDeps {
  authority: AgentAuthority;
  registry: AgentRegistry;
  log: SessionLog;
  clock: Clock;
  /** The lock a child's cold resume and closing take. */
  lock: Pick<ChildLock, 'run'>;
  /** Writes to sessions that are not resident. */
  stored: StoredSessions;
  /** Gives usage its cost (domain/pricing.ts). */
  price: (usage: TokenUsage, model: string | undefined) => TokenUsage;
}

export class Compactions {
  constructor(private readonly deps: CompactionDeps) {}

  /** `POST /v1/agents/{id}/compactions`: the entry as written (seq included), durable. */
  async post(id: string, token: string | undefined, input: CompactionInput): Promise<CompactionEntry> {
    if (this.deps.registry.get(id) === undefined) return this.compactStored(id, input);
    const agent = this.deps.authority.liveWithToken(id, token) ?? (await this.deps.authority.rejectCredential(id));
    return this.compactLive(agent, input);
  }

  /**
   * Compact a live agent. `heldStep`: the built-in driver compacts inside the step it holds
   * (nobody else can see that step yet), so that one claim is allowed.
   */
  async compactLive(agent: LiveAgent, input: CompactionInput, heldStep?: string): Promise<CompactionEntry> {
    const entry = await this.deps.lock.run(agent.id, async () => {
      const check = (): void => {
        if (this.deps.registry.get(agent.id) !== agent || agent.disposing) {
          throw new ServiceError('AGENT_NOT_FOUND', `agent "${agent.id}" left memory meanwhile; the compaction was not written`);
        }
        checkBetweenSteps(agent.id, agent.state, heldStep);
      };
      check();
      const lastSeq = this.deps.log.lastSeq(agent.id) ?? 0;
      const throughSeq = input.throughSeq ?? lastSeq;
      const previous = await this.deps.log.lastCompaction(agent.id, lastSeq);
      const after = await this.deps.log.read(agent.id, Math.min(throughSeq, lastSeq));
      checkThrough(throughSeq, lastSeq, previous, after);
      // Entries appended during the reads all lie past `throughSeq`, and a step claimed and
      // answered meanwhile is refused here: the rules hold for the log as it is now.
      check();
      const body = compactionBody(this.deps.clock.iso(), input.summary, throughSeq, this.priced(input.usage, agent.header));
      return { ...body, seq: this.deps.log.append(agent.id, body).seq };
    });
    await this.deps.log.durable(agent.rootId);
    return entry;
  }

  private priced(usage: TokenUsage | undefined, header: SessionHeader): TokenUsage | undefined {
    return usage === undefined ? undefined : this.deps.price(usage, header.model?.model);
  }

  /** Compact a session that is not resident; AGENT_NOT_FOUND when there is none. */
  private async compactStored(id: string, input: CompactionInput): Promise<CompactionEntry> {
    const summary = await this.deps.log.summary(id);
    if (summary === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    return this.deps.stored.append(summary.header, 'compact it', async (lastSeq) => {
      const throughSeq = input.throughSeq ?? lastSeq;
      const previous = await this.deps.log.lastCompaction(id, lastSeq);
      const after = await this.deps.log.read(id, Math.min(throughSeq, lastSeq));
      // A turn a stopped process left open may await results of calls it made.
      const { open } = await this.deps.log.lastTurn(id);
      checkThrough(throughSeq, lastSeq, previous, after, unansweredIn(open));
      return compactionBody(this.deps.clock.iso(), input.summary, throughSeq, this.priced(input.usage, summary.header));
    });
  }
}

function compactionBody(at: string, summary: string, throughSeq: number, usage: TokenUsage | undefined): Extract<EntryBody, { type: 'compaction' }> {
  const body: Extract<EntryBody, { type: 'compaction' }> = { type: 'compaction', at, summary, throughSeq };
  if (usage !== undefined) body.usage = usage;
  return body;
}
