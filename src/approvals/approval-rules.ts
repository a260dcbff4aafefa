/**
 * The approval rules: `PUT/GET/DELETE /v1/approval-rules/{id}`. A rule is an operator setting,
 * durable before it is answered and in force from then on for every call decided here; with
 * several instances each follows the stored rules like the other settings (settings-follow.ts).
 * Which rule decides a call is the domain's (src/domain/approvals.ts).
 */
import type { Logger } from 'pino';
import type { ApprovalRuleBody, ApprovalRuleView } from '../contract/index.js';
import { decidingRule, type ApprovalRule, type RuleDecision } from '../domain/approvals.js';
import { ServiceError } from '../domain/errors.js';
import type { Clock } from '../domain/ports.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { SettingReads } from '../sessions/settings.js';
import { SettingsFollow } from '../tools/settings-follow.js';

export interface ApprovalRulesDeps {
  log: Pick<SessionLog, 'changeSettings' | 'durable'>;
  settings: SettingReads;
  clock: Clock;
  logger: Logger;
}

type StoredRule = Omit<ApprovalRule, 'id'>;

export class ApprovalRules {
  private readonly rules = new Map<string, { rule: ApprovalRule; updatedAt: string }>();
  private readonly follow = new SettingsFollow(() => this.sync());

  constructor(private readonly deps: ApprovalRulesDeps) {}

  /** Read the stored rules; with `followMs` (several instances), follow them at that period. */
  start(followMs?: number): Promise<void> {
    return this.follow.start(followMs);
  }

  /** Another instance changed the stored settings: follow them now. */
  resync(): void {
    this.follow.again();
  }

  stop(): void {
    this.follow.stop();
  }

  /** What the rules say of a call of `tool` in forest `rootId` (no rule: allow). */
  decide(tool: string, rootId: string): RuleDecision {
    return decidingRule(this.values(), tool, rootId)?.decision ?? 'allow';
  }

  /** Who made it: `{}` for a global rule, undefined when no rule has the id. */
  ownerOf(id: string): { owner?: string } | undefined {
    return this.rules.has(id) ? {} : undefined;
  }

  list(): ApprovalRuleView[] {
    return [...this.rules.keys()].sort().map((id) => this.view(id));
  }

  /** Add or replace a rule; durable before it resolves. */
  put(id: string, body: ApprovalRuleBody): Promise<ApprovalRuleView> {
    return this.follow.serially(async () => {
      this.write(id, ruleOf(id, body));
      await this.deps.log.durable();
      return this.view(id);
    });
  }

  /**
   * Queue a rule into the session log's current batch and put it in force here, in the
   * caller's synchronous span (a decision that remembers commits with its rule).
   */
  write(id: string, rule: ApprovalRule): void {
    const updatedAt = this.deps.clock.iso();
    const { id: _, ...stored } = rule;
    this.deps.log.changeSettings({ op: 'put', setting: { kind: 'approval-rule', name: id, value: stored, updatedAt } });
    this.rules.set(id, { rule, updatedAt });
  }

  /** Remove a rule; durable before it resolves. */
  delete(id: string): Promise<void> {
    if (!this.rules.has(id)) throw new ServiceError('APPROVAL_RULE_NOT_FOUND', `no approval rule has the id "${id}"`);
    return this.follow.serially(async () => {
      this.deps.log.changeSettings({ op: 'delete', kind: 'approval-rule', name: id });
      this.rules.delete(id);
      await this.deps.log.durable();
    });
  }

  /** Follow the stored rules (never throws). */
  sync(): Promise<void> {
    return this.follow
      .serially(async () => {
        const stored = await this.deps.settings.list('approval-rule');
        const wanted = new Set(stored.map((s) => s.name));
        for (const id of [...this.rules.keys()]) if (!wanted.has(id)) this.rules.delete(id);
        for (const setting of stored) {
          if (this.rules.get(setting.name)?.updatedAt === setting.updatedAt) continue;
          this.rules.set(setting.name, { rule: { id: setting.name, ...(setting.value as StoredRule) }, updatedAt: setting.updatedAt });
        }
      })
      .catch((error: unknown) => this.deps.logger.error({ err: error }, 'could not follow the stored approval rules'));
  }

  private *values(): Iterable<ApprovalRule> {
    for (const { rule } of this.rules.values()) yield rule;
  }

  private view(id: string): ApprovalRuleView {
    const { rule, updatedAt } = this.rules.get(id)!;
    return { id, tool: rule.tool, ...(rule.rootId === undefined ? {} : { rootId: rule.rootId }), decision: rule.decision, updatedAt };
  }
}

function ruleOf(id: string, body: ApprovalRuleBody): ApprovalRule {
  return { id, tool: body.tool, ...(body.rootId === undefined ? {} : { rootId: body.rootId }), decision: body.decision };
}
