/**
 * Which approval rule decides a call: a forest's over a global one, an exact name over a
 * wildcard, a longer prefix over a shorter, the most cautious among equals; none: no rule. A
 * tenant's rules apply to its agents and decide only where more cautious than the admin's.
 */
import { describe, expect, it } from 'vitest';
import { decidingRule, deniedText, type ApprovalRule } from '../../src/domain/approvals.js';

const rule = (id: string, tool: string, decision: ApprovalRule['decision'], rootId?: string): ApprovalRule => ({ id, tool, decision, ...(rootId === undefined ? {} : { rootId }) });

describe('decidingRule', () => {
  it('applies no rule to a tool none matches, and a wildcard only to names with its prefix', () => {
    expect(decidingRule([rule('a', 'mcp__files__write_*', 'ask')], 'mcp__files__read_file', 'r')).toBeUndefined();
    expect(decidingRule([rule('a', 'mcp__files__write_*', 'ask')], 'mcp__files__write_file', 'r')?.id).toBe('a');
    expect(decidingRule([rule('a', '*', 'deny')], 'anything', 'r')?.id).toBe('a');
  });

  it('prefers a forest\'s rule to a global one, whatever their tools', () => {
    const rules = [rule('global-exact', 'spawn_subagent', 'deny'), rule('forest-wild', '*', 'allow', 'r')];
    expect(decidingRule(rules, 'spawn_subagent', 'r')?.id).toBe('forest-wild');
    expect(decidingRule(rules, 'spawn_subagent', 'other')?.id).toBe('global-exact');
  });

  it('prefers an exact name to a wildcard, and a longer prefix to a shorter', () => {
    expect(decidingRule([rule('wild', 'spawn_*', 'deny'), rule('exact', 'spawn_subagent', 'allow')], 'spawn_subagent', 'r')?.id).toBe('exact');
    expect(decidingRule([rule('short', 'mcp__*', 'deny'), rule('long', 'mcp__files__*', 'allow')], 'mcp__files__read', 'r')?.id).toBe('long');
  });

  it('among equally specific rules, takes the most cautious: deny, then ask, then allow', () => {
    expect(decidingRule([rule('a', 'x', 'allow'), rule('b', 'x', 'ask')], 'x', 'r')?.id).toBe('b');
    expect(decidingRule([rule('a', 'x', 'deny'), rule('b', 'x', 'ask')], 'x', 'r')?.id).toBe('a');
  });

  it("a tenant's rules narrow what the admin's rules allow and never widen it; another tenant's never apply", () => {
    const owned = (r: ApprovalRule, tenantId: string): ApprovalRule => ({ ...r, tenantId });
    const rules = [rule('admin-deny', 'spawn_*', 'deny'), owned(rule('t-allow', 'spawn_subagent', 'allow', 'r'), 't'), owned(rule('t-ask', 'send_message', 'ask'), 't')];
    // More specific, but less cautious than the admin's: the admin's decides.
    expect(decidingRule(rules, 'spawn_subagent', 'r', 't')?.id).toBe('admin-deny');
    // No admin rule: the tenant's decides, for its agents only.
    expect(decidingRule(rules, 'send_message', 'r', 't')?.id).toBe('t-ask');
    expect(decidingRule(rules, 'send_message', 'r', 'u')).toBeUndefined();
    expect(decidingRule(rules, 'send_message', 'r')).toBeUndefined();
    // More cautious than the admin's allow: the tenant's decides.
    const allowed = [rule('admin-allow', 'send_message', 'allow'), owned(rule('t-deny', 'send_*', 'deny'), 't')];
    expect(decidingRule(allowed, 'send_message', 'r', 't')?.id).toBe('t-deny');
  });
});

describe('texts', () => {
  it('adds the reason to a denial only when one is given', () => {
    expect(deniedText('refund', undefined)).toBe('Error: a person denied the call to refund');
    expect(deniedText('refund', '')).toBe('Error: a person denied the call to refund');
    expect(deniedText('refund', 'too much')).toBe('Error: a person denied the call to refund: too much');
  });
});
