/**
 * Least agency under any sequence of spawns and grant changes (seeded, replayable): after every
 * step, no agent's effective tools hold a tool one of its ancestors may not call, a refused
 * change (400) changes nothing, and a tool an agent may not call is neither listed to it nor
 * run for it. The universe is the service's spawn tool and the tools of two MCP servers.
 */
import { describe, expect, it } from 'vitest';
import { startStreamableServer } from '../fixtures/mcp-server.js';
import { mulberry32 } from '../fixtures/random.js';
import { createRoot, json, type CreatedRoot, type Harness, startHarness } from '../fixtures/harness.js';

const SEEDS = [1, 2, 3, 4];
const STEPS = 30;

/** Grants a step may ask for: exact names, wildcards of every width, a package name. */
const GRANT_CHOICES = [
  'spawn_subagent',
  'subagent',
  'mcp__*',
  'mcp__a__*',
  'mcp__b__*',
  'mcp__a__echo',
  'mcp__a__lookup',
  'mcp__b__e*',
  'mcp__b__fails',
  'mcp__a__w*',
];

/** The tools whose scope is every in-process agent's: what the invariant compares. */
function comparable(names: readonly string[]): string[] {
  return names.filter((n) => n === 'spawn_subagent' || n.startsWith('mcp__')).sort();
}

interface Node extends CreatedRoot {
  parent: Node | undefined;
}

async function effective(h: Harness, id: string): Promise<{ grants: string[]; effective: string[] }> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}/grants` });
  expect(res.statusCode).toBe(200);
  return json(res);
}

async function listed(h: Harness, agent: Node): Promise<string[]> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${agent.id}/tools`, headers: { 'x-agent-token': agent.token } });
  return json<{ tools: { name: string }[] }>(res).tools.map((t) => t.name);
}

describe('grants under random spawns and changes', () => {
  it.each(SEEDS)('seed %i: no descendant ever holds a tool an ancestor lacks, and a refused change changes nothing', async (seed) => {
    const random = mulberry32(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const some = (): string[] => GRANT_CHOICES.filter(() => random() < 0.3);
    const server = await startStreamableServer();
    const h = await startHarness();
    for (const name of ['a', 'b']) expect((await h.app.inject({ method: 'PUT', url: `/v1/tool-servers/${name}`, payload: { url: server.url } })).statusCode).toBe(200);
    const root = await createRoot(h.app, { tools: ['spawn_subagent', 'mcp__*'] });
    const agents: Node[] = [{ ...root, parent: undefined }];

    for (let step = 0; step < STEPS; step++) {
      const target = pick(agents);
      const wanted = some();
      const before = await effective(h, target.id);
      if (random() < 0.6) {
        const body: Record<string, unknown> = { mode: 'continuable', prompt: `task ${step}` };
        if (random() < 0.7) body.tools = wanted;
        const res = await h.app.inject({ method: 'POST', url: `/v1/agents/${target.id}/children`, headers: { 'x-agent-token': target.token }, payload: body });
        if (res.statusCode === 201) {
          const created = json<{ agent: { id: string }; agentToken: string }>(res);
          agents.push({ id: created.agent.id, token: created.agentToken, parent: target });
        } else {
          expect(res.statusCode, res.body).toBe(400);
          expect(json(res)).toMatchObject({ code: 'VALIDATION' });
        }
      } else {
        const res = await h.app.inject({ method: 'PUT', url: `/v1/agents/${target.id}/grants`, payload: { grants: wanted } });
        if (res.statusCode !== 200) {
          expect(res.statusCode, res.body).toBe(400);
          expect(await effective(h, target.id)).toEqual(before);
        }
      }

      const now = new Map<string, string[]>();
      for (const agent of agents) now.set(agent.id, comparable((await effective(h, agent.id)).effective));
      for (const agent of agents) {
        const own = now.get(agent.id)!;
        if (agent === target) expect(comparable(await listed(h, agent))).toEqual(own);
        for (let above = agent.parent; above !== undefined; above = above.parent) {
          const theirs = new Set(now.get(above.id));
          const extra = own.filter((name) => !theirs.has(name));
          expect(extra, `seed ${seed} step ${step}: ${agent.id} holds what its ancestor ${above.id} lacks`).toEqual([]);
        }
      }
    }
    // The scenario did build a tree (more than the root), or the checks above proved little.
    expect(agents.length).toBeGreaterThan(3);
    await h.close();
  });
});
