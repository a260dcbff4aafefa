/**
 * `list_agents` (package subagent-control) and its `scope` over HTTP: the default (and
 * `children`) lists the caller's own continuable children as before, each entry now with its
 * `parentId` and `depth`; `descendants` lists every depth, parents before their children, and
 * renders each line with its parent and depth. One-shot children are never listed, nor what
 * lies below them.
 */
import { describe, expect, it } from 'vitest';
import { claimStep, nextStep, startChild, type Child } from '../fixtures/forest.js';
import { createRoot, postOutput, send, session, settle, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { callTool, textOf } from '../fixtures/interrupts.js';

interface Listing {
  kind: string;
  id: string;
  label: string;
  status: string;
  parentId: string;
  depth: number;
}

async function listAgents(h: Harness, caller: CreatedRoot, input: Record<string, unknown>): Promise<{ output: Listing[]; content: string }> {
  const res = await callTool(h, caller, 'list_agents', input);
  if (res.statusCode !== 200) throw new Error(`list_agents failed: ${res.statusCode} ${res.body}`);
  const { output, content } = res.json() as { output: Listing[]; content: string };
  return { output, content };
}

/**
 * r → alpha → alpha-1 (settled), r → beta, r → once (one-shot) → below-once, and a
 * continuable child of another root: the forest every test lists.
 */
async function forest(h: Harness): Promise<Record<'r' | 'alpha' | 'alpha1' | 'beta' | 'once' | 'belowOnce' | 'stranger', Child | CreatedRoot>> {
  const r = await createRoot(h.app, { id: 'r' });
  const alpha = await startChild(h, r, { label: 'alpha' });
  const once = await startChild(h, r, { mode: 'one-shot', label: 'once' });
  const beta = await startChild(h, r, { label: 'beta' });
  const alpha1 = await startChild(h, alpha, { label: 'alpha one' });
  expect((await postOutput(h.app, alpha1, (await claimStep(h, alpha1)).id, { content: 'done' })).statusCode).toBe(200);
  await until(() => h.system.registry.get(alpha1.id) === undefined, 'alpha-1 settles');
  const belowOnce = await startChild(h, once, { label: 'below once' });
  const other = await createRoot(h.app, { id: 'other' });
  const stranger = await startChild(h, other, { label: 'stranger' });
  return { r, alpha, alpha1, beta, once, belowOnce, stranger };
}

describe('list_agents scope', () => {
  it('default and "children": the caller\'s continuable children only, each with parentId and depth, rendered "<id> [<status>] — <label>"', async () => {
    const h = await startHarness();
    const f = await forest(h);
    const listed = await listAgents(h, f.r, {});
    expect(listed.output).toEqual([
      { kind: 'child', id: f.alpha.id, label: 'alpha', status: 'running', parentId: 'r', depth: 1 },
      { kind: 'child', id: f.beta.id, label: 'beta', status: 'running', parentId: 'r', depth: 1 },
    ]);
    expect(listed.content).toBe(`${f.alpha.id} [running] — alpha\n${f.beta.id} [running] — beta`);
    expect(await listAgents(h, f.r, { scope: 'children' })).toEqual(listed);
  });

  it('"descendants": every depth, parents before their children, rendered with "(parent <parentId>, depth <d>)"; one-shot children and what lies below them omitted', async () => {
    const h = await startHarness();
    const f = await forest(h);
    const listed = await listAgents(h, f.r, { scope: 'descendants' });
    expect(listed.output).toEqual([
      { kind: 'child', id: f.alpha.id, label: 'alpha', status: 'running', parentId: 'r', depth: 1 },
      { kind: 'child', id: f.alpha1.id, label: 'alpha one', status: 'complete', parentId: f.alpha.id, depth: 2 },
      { kind: 'child', id: f.beta.id, label: 'beta', status: 'running', parentId: 'r', depth: 1 },
    ]);
    expect(listed.content.split('\n')).toEqual([
      `${f.alpha.id} [running] — alpha (parent r, depth 1)`,
      `${f.alpha1.id} [complete] — alpha one (parent ${f.alpha.id}, depth 2)`,
      `${f.beta.id} [running] — beta (parent r, depth 1)`,
    ]);
    expect(listed.content).not.toContain(f.once.id);
    expect(listed.content).not.toContain(f.belowOnce.id);
    expect(listed.content).not.toContain(f.stranger.id);
  });

  it('a child lists its own subtree only, with depths counted from the root', async () => {
    const h = await startHarness();
    const f = await forest(h);
    expect((await listAgents(h, f.alpha, { scope: 'descendants' })).output).toEqual([
      { kind: 'child', id: f.alpha1.id, label: 'alpha one', status: 'complete', parentId: f.alpha.id, depth: 2 },
    ]);
    expect((await listAgents(h, f.alpha, {})).content).toBe(`${f.alpha1.id} [complete] — alpha one`);
  });

  it('the rendering is what a step\'s output records as the call\'s result', async () => {
    const h = await startHarness();
    const f = await forest(h);
    expect((await send(h.app, 'r', 'who is there?')).statusCode).toBe(202);
    await settle();
    const step = await nextStep(h, f.r);
    const res = await postOutput(h.app, f.r, step.id, { toolCalls: [{ id: 'l1', name: 'list_agents', input: { scope: 'descendants' } }] });
    const result = (res.json() as { toolResults: { content: string; output: Listing[] }[] }).toolResults[0]!;
    expect(result.output.map((c) => c.id)).toEqual([f.alpha.id, f.alpha1.id, f.beta.id]);
    const logged = (await session(h.app, 'r')).find((e) => e.type === 'message' && e.role === 'tool' && e.toolCallId === 'l1');
    expect(textOf(logged!)).toBe(result.content);
    expect(result.content).toContain(`${f.alpha1.id} [complete] — alpha one (parent ${f.alpha.id}, depth 2)`);
  });

  it('a scope that is neither "children" nor "descendants" is refused and lists nothing', async () => {
    const h = await startHarness();
    const f = await forest(h);
    const res = await callTool(h, f.r, 'list_agents', { scope: 'everyone' });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ code: 'VALIDATION', toolResult: { isError: true } });
  });
});
