/**
 * The approval rules: `PUT/GET/DELETE /v1/approval-rules/{id}`. A rule is an operator setting,
 * durable before it is answered and in force from then on for every call decided here; with
 * several instances each follows the stored rules like the other settings (settings-follow.ts).
 * Which rule decides a call is the domain's (src/domain/approvals.ts).
 *
 * A rule made with a tenant's key is that tenant's (tools/setting-owners.ts): listed to it and
 * to admins, applied to its agents only; who may put or remove an id is checked again in the
 * span that queues the change. A rule a decision remembers belongs to the tenant of the agent
 * whose call was decided.
 */
import type { Logger } from 'pino';
import type { ApprovalRuleBody, ApprovalRuleView } from '../contract/index.js';
import { decidingRule, type ApprovalRule, type RuleDecision } from '../domain/approvals.js';
import { ServiceError } from '../domain/errors.js';
import type { Clock } from '../domain/ports.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { SettingReads } from '../sessions/settings.js';
import { SettingsFollow } from '../tools/settings-follow.js';
import { mayChange, ownedBy, ownerAfterPut, ownership, seesSetting } from '../tools/setting-owners.js';

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

  /**
   * What the rules say of a call of `tool` in forest `rootId` of tenant `tenantId` (undefined:
   * a forest made with an admin key); no rule: allow.
   */
  decide(tool: string, rootId: string, tenantId: string | undefined): RuleDecision {
    return decidingRule(this.values(), tool, rootId, tenantId)?.decision ?? 'allow';
  }

  /** Who made it: `{}` for a global rule, `{owner}` for a tenant's, undefined when no rule has the id. */
  ownerOf(id: string): { owner?: string } | undefined {
    const found = this.rules.get(id);
    return found === undefined ? undefined : ownership(found.rule.tenantId);
  }

  /** The rules `tenantId` sees (its own and the global ones; undefined, an admin: all), by id. */
  list(tenantId: string | undefined): ApprovalRuleView[] {
    return [...this.rules.keys()].sort().filter((id) => seesSetting(tenantId, this.rules.get(id)!.rule.tenantId)).map((id) => this.view(id));
  }

  /**
   * Add or replace a rule for `tenantId` (undefined: an admin; over a tenant's rule, it stays
   * that tenant's); durable before it resolves.
   */
  put(id: string, body: ApprovalRuleBody, tenantId?: string): Promise<ApprovalRuleView> {
    return this.follow.serially(async () => {
      // In the span that queues the write: the id may have been taken since the route's check.
      const owner = ownerAfterPut(id, tenantId, this.ownerOf(id), () => approvalRuleNotFound(id));
      this.write(id, { ...ruleOf(id, body), ...ownedBy(owner) });
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

  /** Remove a rule (`tenantId`: the caller's, undefined for an admin); durable before it resolves. */
  delete(id: string, tenantId?: string): Promise<void> {
    if (!this.rules.has(id)) throw approvalRuleNotFound(id);
    return this.follow.serially(async () => {
      const current = this.ownerOf(id);
      if (current === undefined) throw approvalRuleNotFound(id);
      mayChange(id, tenantId, current, () => approvalRuleNotFound(id));
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
    return { id, tool: rule.tool, ...(rule.rootId === undefined ? {} : { rootId: rule.rootId }), decision: rule.decision, updatedAt, ...ownedBy(rule.tenantId) };
  }
}

/** The answer to a name that does not exist (the same for one another tenant holds). */
export function approvalRuleNotFound(id: string): ServiceError {
  return new ServiceError('APPROVAL_RULE_NOT_FOUND', `no approval rule has the id "${id}"`);
}

function ruleOf(id: string, body: ApprovalRuleBody): ApprovalRule {
  return { id, tool: body.tool, ...(body.rootId === undefined ? {} : { rootId: body.rootId }), decision: body.decision };
}
