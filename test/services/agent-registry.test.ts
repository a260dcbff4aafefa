/**
 * The registry keeps each forest's live agents as the agent itself while it is alone and as a
 * set once there are more: whatever the order of arrivals and departures, a forest's members
 * and count are exactly the live agents of that forest, and an agent's newer incarnation is
 * never removed with the older one. Arrivals and departures are announced once the registry
 * shows them. Also the agent scope, whose tool map is made on first use.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { SessionHeader } from '../../src/domain/session.js';
import { AgentRegistry } from '../../src/agents/agent-registry.js';
import { AgentScope, type LiveAgent } from '../../src/agents/live-agent.js';
import type { ServiceTool } from '../../src/tools/tool-registry.js';

/** Just what the registry reads of an agent. */
function agent(id: string, root: string | null, parent: string | null = root): LiveAgent {
  const header = { id, parentSession: parent, rootSession: root ?? undefined } as unknown as SessionHeader;
  return { id, rootId: root ?? id, header } as unknown as LiveAgent;
}

const ids = (agents: LiveAgent[]): string[] => agents.map((a) => a.id).sort();

describe('AgentRegistry forests', () => {
  it('counts and lists a lone root, its children, and what is left as they go', () => {
    const registry = new AgentRegistry();
    const root = agent('r', null);
    const a = agent('a', 'r');
    const b = agent('b', 'r', 'a');
    registry.add(root);
    expect(registry.liveInForest('r')).toBe(1);
    expect(ids(registry.forestMembers('r'))).toEqual(['r']);
    registry.add(a);
    registry.add(b);
    expect(registry.liveInForest('r')).toBe(3);
    expect(ids(registry.forestMembers('r'))).toEqual(['a', 'b', 'r']);
    registry.remove(root);
    registry.remove(a);
    expect(ids(registry.forestMembers('r'))).toEqual(['b']);
    registry.remove(b);
    expect(registry.liveInForest('r')).toBe(0);
    expect(registry.forestMembers('r')).toEqual([]);
    // A forest that emptied starts again with one agent.
    registry.add(a);
    expect(ids(registry.forestMembers('r'))).toEqual(['a']);
  });

  it('announces an arrival once the agent is live and listed under its parent, and a departure once it is gone', () => {
    const seen: string[] = [];
    const registry: AgentRegistry = new AgentRegistry(undefined, {
      added: (a) => seen.push(`added ${a.id}: live ${registry.get(a.id) === a}, child ${registry.hasLiveChildren('r')}`),
      left: (a) => seen.push(`left ${a.id}: live ${registry.get(a.id) !== undefined}, in forest ${registry.liveInForest('r')}`),
    });
    const root = agent('r', null);
    const child = agent('a', 'r');

    registry.add(root);
    registry.add(child);
    registry.remove(child);
    registry.remove(child);

    expect(seen).toEqual(['added r: live true, child false', 'added a: live true, child true', 'left a: live false, in forest 1']);
  });

  it('does not remove a newer incarnation with the older one', () => {
    const registry = new AgentRegistry();
    const old = agent('c', 'r');
    registry.add(old);
    const newer = agent('c', 'r');
    registry.remove(old);
    registry.add(newer);
    registry.remove(old);
    expect(registry.get('c')).toBe(newer);
    expect(registry.forestMembers('r')).toEqual([newer]);
  });

  it('matches a plain model of live agents per forest over any order of adds and removes', () => {
    const pool = ['r1', 'r2'].flatMap((root) => [agent(root, null), agent(`${root}-a`, root), agent(`${root}-b`, root)]);
    fc.assert(
      fc.property(fc.array(fc.record({ add: fc.boolean(), which: fc.nat(pool.length - 1) }), { maxLength: 40 }), (ops) => {
        const registry = new AgentRegistry({ liveAgents: 100, childrenPerParent: 100 });
        const live = new Set<LiveAgent>();
        for (const { add, which } of ops) {
          const target = pool[which]!;
          if (add && registry.get(target.id) === undefined) {
            registry.add(target);
            live.add(target);
          } else if (!add) {
            registry.remove(target);
            live.delete(target);
          }
        }
        for (const root of ['r1', 'r2']) {
          const expected = [...live].filter((a) => a.rootId === root);
          expect(ids(registry.forestMembers(root))).toEqual(ids(expected));
          expect(registry.liveInForest(root)).toBe(expected.length);
        }
      }),
    );
  });
});

describe('AgentScope', () => {
  it('finds and lists the tools installed through its map, and nothing before', () => {
    const scope = new AgentScope();
    expect(scope.tool('report')).toBeUndefined();
    expect([...scope.list()]).toEqual([]);
    const tool = { name: 'report' } as ServiceTool;
    scope.tools.set('report', tool);
    expect(scope.tool('report')).toBe(tool);
    expect([...scope.list()]).toEqual([tool]);
    scope.tools.delete('report');
    expect(scope.tool('report')).toBeUndefined();
    expect([...scope.list()]).toEqual([]);
  });
});
