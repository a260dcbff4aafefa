/**
 * The forest view (/ui) in a real browser against a real server with an operator key: the key
 * prompt (a wrong key refused, the key kept in sessionStorage and never in a URL), the start
 * page's live roots, the tree from the forest stream with a child that appears live and reports
 * under the parent that received them, the session reader, a dropped stream that resumes with
 * Last-Event-ID and shows every agent and report exactly once, and a forest of 1,000 agents.
 * Runs wherever the tests run: with no browser that can start, it fails and says why.
 *
 * With AGENTFOREST_SCREENSHOTS=1 it writes docs/images/forest-view.png and session.png.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, openPage, screenshot, storedKey } from '../fixtures/browser.js';
import { startCuttableProxy } from '../fixtures/cuttable-proxy.js';
import { buildResearchForest, startLabelledChild, stepWith, usage, type ResearchForest } from '../fixtures/research-forest.js';
import { report, uniqueId, view, waitForSession, WAIT_MS, type ChildRef } from '../fixtures/scenario-steps.js';
import { ServerClient, startServer, stopLeftoverServers, type AgentRef, type RunningServer } from '../fixtures/server-process.js';

const KEY = 'forest-view-test-key';

const agentNode = (id: string): string => `li.agent[data-agent-id=${JSON.stringify(id)}]`;
const childNode = (parentId: string, id: string): string => `${agentNode(parentId)} > ul.children > ${agentNode(id)}`;
const reportNode = (parentId: string, messageId: string): string => `${agentNode(parentId)} > ol.reports > li.report[data-message-id=${JSON.stringify(messageId)}]`;

/** Chromium logs every non-2xx fetch as a console error; the page expects 401s (and drops). */
const pageFaults = (errors: readonly string[]): string[] => errors.filter((e) => !e.includes('Failed to load resource'));

describe('the forest view in a browser', () => {
  let server: RunningServer;
  let api: ServerClient;
  let browser: Browser;

  beforeAll(async () => {
    server = await startServer({ dataPath: ':memory:', env: { AGENTFOREST_API_KEYS: KEY } });
    api = new ServerClient(server, KEY);
    browser = await launchBrowser();
  });

  afterAll(async () => {
    await browser?.close();
    await stopLeftoverServers();
  });

  const createRoot = (prefix: string): Promise<AgentRef> => api.createRoot({ id: uniqueId(prefix), instructions: 'You coordinate research.' });

  const startChild = (parent: AgentRef, label: string): Promise<ChildRef> => startLabelledChild(api, parent, label);
  const researchForest = (): Promise<ResearchForest> => buildResearchForest(api);
  const step = (agent: AgentRef, output: Record<string, unknown>) => stepWith(api, agent, output);
  const nameButton = (page: Page, id: string) => page.locator(`${agentNode(id)} > .row .name`);

  it('asks for the operator key, refuses a wrong one, and keeps the right one in sessionStorage, never in a URL', async () => {
    const root = await createRoot('auth');
    const shell = await fetch(`${server.url}/ui`);
    expect(shell.status).toBe(200);
    expect(shell.headers.get('content-type')).toMatch(/^text\/html/);
    expect((await fetch(`${server.url}/v1/agents`)).status).toBe(401);

    const { page, errors, requests } = await openPage(browser, `${server.url}/ui`);
    const dialog = page.locator('dialog.key-dialog[open]');
    await dialog.waitFor();
    expect(await dialog.locator('.key-error').isVisible()).toBe(false);

    await dialog.locator('input[name=key]').fill('not-the-key');
    await dialog.locator('button[type=submit]').click();
    await page.locator('dialog.key-dialog[open] .key-error').waitFor({ state: 'visible' });
    expect(await storedKey(page)).toBeNull();

    await page.locator('dialog.key-dialog[open] input[name=key]').fill(KEY);
    await page.locator('dialog.key-dialog[open] button[type=submit]').click();
    await page.locator(`tr.root[data-agent-id=${JSON.stringify(root.id)}]`).waitFor();
    expect(await page.locator('dialog.key-dialog').count()).toBe(0);
    expect(await storedKey(page)).toBe(KEY);

    // Reloading the tab keeps the key: no prompt again.
    await page.reload();
    await page.locator(`tr.root[data-agent-id=${JSON.stringify(root.id)}]`).waitFor();
    expect(await page.locator('dialog.key-dialog').count()).toBe(0);

    expect(page.url()).not.toContain(KEY);
    expect(requests.filter((r) => r.url.includes('/v1/')).length).toBeGreaterThan(0);
    for (const { url } of requests) expect(url).not.toContain(KEY);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('with no keys configured, shows the forests without asking for one, and says when a root is not live', async () => {
    const open = await startServer({ dataPath: ':memory:' });
    const openApi = new ServerClient(open);
    const root = await openApi.createRoot({ id: uniqueId('keyless') });
    const { page, errors } = await openPage(browser, `${open.url}/ui`);
    await page.locator(`tr.root[data-agent-id=${JSON.stringify(root.id)}]`).waitFor();
    expect(await page.locator('dialog.key-dialog').count()).toBe(0);
    expect(await storedKey(page)).toBeNull();
    expect(await page.locator('#top-actions button').count()).toBe(0);

    await page.goto(`${open.url}/ui/forests/no-such-root`);
    expect(await page.locator('.page-message h1').textContent()).toBe('No live root "no-such-root"');
    expect(pageFaults(errors)).toEqual([]);
  });

  it('lists the live roots on the start page, each linking to its forest', async () => {
    const roots = [await createRoot('listed'), await createRoot('listed')];
    const child = await startChild(roots[0]!, 'not-a-root');
    const { page, errors } = await openPage(browser, `${server.url}/ui`, { key: KEY });
    for (const root of roots) {
      const link = page.locator(`tr.root[data-agent-id=${JSON.stringify(root.id)}] a`);
      await link.waitFor();
      expect(await link.getAttribute('href')).toBe(`/ui/forests/${root.id}`);
    }
    expect(await page.locator(`tr.root[data-agent-id=${JSON.stringify(child.id)}]`).count()).toBe(0);

    await page.locator(`tr.root[data-agent-id=${JSON.stringify(roots[0]!.id)}] a`).click();
    await page.locator(childNode(roots[0]!.id, child.id)).waitFor();
    expect(new URL(page.url()).pathname).toBe(`/ui/forests/${roots[0]!.id}`);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('draws the tree, adds a new child live, and shows each report under the parent that received it', async () => {
    const root = await createRoot('live');
    const first = await startChild(root, 'papers');
    const second = await startChild(root, 'benchmarks');
    const { page, errors } = await openPage(browser, `${server.url}/ui/forests/${root.id}`, { key: KEY });
    await page.locator(childNode(root.id, second.id)).waitFor();
    expect(await page.locator(`${agentNode(root.id)} > ul.children > li.agent`).evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-agent-id')))).toEqual([first.id, second.id]);
    expect(await page.locator(`${agentNode(first.id)} > .row .name`).textContent()).toBe('papers');
    expect(await page.locator(`${agentNode(first.id)} > .row .kind`).textContent()).toBe('continuable');
    expect(await page.locator(`${agentNode(first.id)} > .row .status`).textContent()).toBe('running');
    await page.locator('.stream-state[data-state=live]').waitFor();

    // Born after the page loaded: only the stream tells of them.
    const third = await startChild(root, 'open-problems');
    const grandchild = await startChild(first, 'retrieval');
    await page.locator(childNode(root.id, third.id)).waitFor();
    await page.locator(childNode(first.id, grandchild.id)).waitFor();

    // The root is idle: a quiet report is appended to its session at once.
    const toRoot = await report(api, first, 'Three papers on episodic memory stand out.');
    await page.locator(reportNode(root.id, toRoot)).waitFor({ state: 'attached' });
    // `first` has an open turn: the report is staged (counted) until its next step starts.
    const toFirst = await report(api, grandchild, 'Dense retrieval beats BM25 on two of the three benchmarks.');
    const staged = (await view(api, first.id)).staged;
    expect(staged).toBeGreaterThan(0);
    await page.locator(`${agentNode(first.id)} > .row .counts:text-is("staged ${staged}")`).waitFor();
    expect(await page.locator(`li.report[data-message-id=${JSON.stringify(toFirst)}]`).count()).toBe(0);
    expect(await api.claim(first, WAIT_MS)).not.toBeNull();
    await page.locator(reportNode(first.id, toFirst)).waitFor({ state: 'attached' });
    await page.locator(`${agentNode(first.id)} > .row .counts:text-is("")`).waitFor({ state: 'attached' });
    expect(await page.locator(`${reportNode(root.id, toRoot)} .report-text`).textContent()).toBe('Three papers on episodic memory stand out.');
    expect(await page.locator(`${reportNode(root.id, toRoot)}`).getAttribute('data-from')).toBe(first.id);
    expect(await page.locator(`${reportNode(first.id, toFirst)} .report-from`).textContent()).toBe('retrieval');
    // Under its receiver only.
    expect(await page.locator(`li.report[data-message-id=${JSON.stringify(toRoot)}]`).count()).toBe(1);
    expect(await page.locator(`li.report[data-message-id=${JSON.stringify(toFirst)}]`).count()).toBe(1);

    // Collapsing the parent hides its subtree; expanding shows it again.
    await page.locator(`${agentNode(first.id)} > .row .toggle`).click();
    expect(await page.locator(agentNode(grandchild.id)).isVisible()).toBe(false);
    await page.locator(`${agentNode(first.id)} > .row .toggle`).click();
    expect(await page.locator(agentNode(grandchild.id)).isVisible()).toBe(true);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('shows an agent waiting on a tool call with the tool\'s name, until its result is in', async () => {
    const root = await createRoot('tools');
    const { page, errors } = await openPage(browser, `${server.url}/ui/forests/${root.id}`, { key: KEY });
    await page.locator('.stream-state[data-state=live]').waitFor();
    await api.send(root.id, 'look it up');
    const claimed = await api.claim(root, WAIT_MS);
    expect(claimed).not.toBeNull();
    await api.expect(200, 'POST', `/v1/agents/${root.id}/steps/${claimed!.id}/output`, {
      token: root.token,
      body: { toolCalls: [{ id: 'c1', name: 'web_search', input: { q: 'orchards' } }, { id: 'c2', name: 'crm_lookup', input: {} }] },
    });
    const waiting = page.locator(`${agentNode(root.id)} > .row .tool-wait`);
    await page.locator(`${agentNode(root.id)} > .row .tool-wait:text-is("waiting on web_search, crm_lookup")`).waitFor();
    await api.expect(200, 'POST', `/v1/agents/${root.id}/steps/${claimed!.id}/tool-results`, { token: root.token, body: { results: [{ toolCallId: 'c1', content: 'found' }] } });
    await page.locator(`${agentNode(root.id)} > .row .tool-wait:text-is("waiting on crm_lookup")`).waitFor();
    await api.expect(200, 'POST', `/v1/agents/${root.id}/steps/${claimed!.id}/tool-results`, { token: root.token, body: { results: [{ toolCallId: 'c2', content: 'ann' }] } });
    await page.locator(`${agentNode(root.id)} > .row .tool-wait:text-is("")`).waitFor({ state: 'attached' });
    expect(await waiting.isVisible()).toBe(false);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('shows what an agent already waits on when the page opens, from its view, and follows the stream from there', async () => {
    const root = await createRoot('tools-before');
    await api.send(root.id, 'look it up');
    const claimed = await api.claim(root, WAIT_MS);
    expect(claimed).not.toBeNull();
    await api.expect(200, 'POST', `/v1/agents/${root.id}/steps/${claimed!.id}/output`, {
      token: root.token,
      body: { toolCalls: [{ id: 'c1', name: 'web_search', input: { q: 'orchards' } }, { id: 'c2', name: 'crm_lookup', input: {} }] },
    });
    await api.expect(200, 'POST', `/v1/agents/${root.id}/steps/${claimed!.id}/tool-results`, { token: root.token, body: { results: [{ toolCallId: 'c1', content: 'found' }] } });
    expect((await view(api, root.id)).awaiting).toEqual([{ id: 'c2', name: 'crm_lookup' }]);

    const { page, errors } = await openPage(browser, `${server.url}/ui/forests/${root.id}`, { key: KEY });
    await page.locator('.stream-state[data-state=live]').waitFor();
    await page.locator(`${agentNode(root.id)} > .row .tool-wait:text-is("waiting on crm_lookup")`).waitFor();
    await api.expect(200, 'POST', `/v1/agents/${root.id}/steps/${claimed!.id}/tool-results`, { token: root.token, body: { results: [{ toolCallId: 'c2', content: 'ann' }] } });
    await page.locator(`${agentNode(root.id)} > .row .tool-wait:text-is("")`).waitFor({ state: 'attached' });
    expect((await view(api, root.id)).awaiting).toBeUndefined();
    expect(pageFaults(errors)).toEqual([]);
  });

  it('resumes a dropped stream with Last-Event-ID: what happened meanwhile shows, every agent and report exactly once', async () => {
    const proxy = await startCuttableProxy(server.url);
    const root = await createRoot('resume');
    const before = [await startChild(root, 'before-1'), await startChild(root, 'before-2')];
    const earlyReport = await report(api, before[0]!, 'before the drop');
    const { page, errors, requests } = await openPage(browser, `${proxy.url}/ui/forests/${root.id}`, { key: KEY });
    await page.locator(reportNode(root.id, earlyReport)).waitFor({ state: 'attached' });
    await page.locator('.stream-state[data-state=live]').waitFor();

    // Cut every connection and keep new ones waiting: the page is certainly offline meanwhile.
    proxy.hold();
    proxy.cut();
    await page.locator('.stream-state[data-state=reconnecting]').waitFor();
    const during = [await startChild(root, 'during-1'), await startChild(root, 'during-2')];
    const grandchild = await startChild(during[0]!, 'during-grandchild');
    const duringReports = [await report(api, before[1]!, 'while offline, one'), await report(api, during[1]!, 'while offline, two')];
    proxy.release();

    await page.locator('.stream-state[data-state=live]').waitFor();
    for (const child of [...before, ...during]) await page.locator(childNode(root.id, child.id)).waitFor();
    await page.locator(childNode(during[0]!.id, grandchild.id)).waitFor();
    for (const id of [earlyReport, ...duringReports]) await page.locator(reportNode(root.id, id)).waitFor({ state: 'attached' });

    const after = await startChild(root, 'after');
    const afterReport = await report(api, after, 'after the drop');
    await page.locator(reportNode(root.id, afterReport)).waitFor({ state: 'attached' });
    // The child's node comes once its view is read, which may be after its report.
    await page.locator(childNode(root.id, after.id)).waitFor();

    const ids = await page.locator('li.agent').evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-agent-id')));
    expect(ids.sort()).toEqual([root.id, ...before.map((c) => c.id), ...during.map((c) => c.id), grandchild.id, after.id].sort());
    const reports = await page.locator('li.report').evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-message-id')));
    expect(reports.sort()).toEqual([earlyReport, ...duringReports, afterReport].sort());
    // Opened from the start, then again after the cut, resuming after the last id it received.
    const streams = requests.filter((r) => r.url.includes(`/v1/agents/${root.id}/events`));
    expect(streams.length).toBeGreaterThanOrEqual(2);
    expect(streams[0]!.headers['last-event-id']).toBeUndefined();
    expect(streams.at(-1)!.headers['last-event-id']).toMatch(/^[1-9][0-9]*$/);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('shows a forest of 1,000 agents, every one of them', async () => {
    const root = await createRoot('thousand');
    const ids = [root.id];
    const middle: ChildRef[] = [];
    for (let i = 0; i < 9; i++) middle.push(await startChild(root, `group-${i + 1}`));
    ids.push(...middle.map((c) => c.id));
    // 9 groups of 110 leaves: 1 + 9 + 990 = 1,000, created a few at a time.
    const leaves = middle.flatMap((parent) => Array.from({ length: 110 }, (_, i) => () => startChild(parent, `${parent.id.slice(-4)}-leaf-${i + 1}`)));
    for (let i = 0; i < leaves.length; i += 10) {
      const made = await Promise.all(leaves.slice(i, i + 10).map((make) => make()));
      ids.push(...made.map((c) => c.id));
    }
    expect(ids).toHaveLength(1000);

    const { page, errors } = await openPage(browser, `${server.url}/ui/forests/${root.id}`, { key: KEY });
    await page.locator('li.agent').nth(999).waitFor({ state: 'attached', timeout: 30_000 });
    const shown = await page.locator('li.agent').evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-agent-id')));
    expect(shown.sort()).toEqual([...ids].sort());
    expect(await page.locator('.summary').textContent()).toMatch(/^1000 agents/);
    // Nested as created: every group holds its 110 leaves.
    for (const group of middle) expect(await page.locator(`${agentNode(group.id)} > ul.children > li.agent`).count()).toBe(110);

    // Still live: a report to the root and one more child show up.
    const sent = await report(api, middle[4]!, 'group 5 is done');
    await page.locator(reportNode(root.id, sent)).waitFor({ state: 'attached' });
    expect(pageFaults(errors)).toEqual([]);
  }, 60_000);

  it('reads an agent\'s session as a transcript: turns, steps, tool calls, results and reports, then its new entries live', async () => {
    const forest = await researchForest();
    const { page, errors } = await openPage(browser, `${server.url}/ui/forests/${forest.root.id}`, { key: KEY });
    await page.locator(childNode(forest.papers.id, forest.retrieval.id)).waitFor();
    await page.locator(`${agentNode(forest.root.id)} > ol.reports > li.report`).nth(2).waitFor({ state: 'attached' });
    await page.locator(`${agentNode(forest.papers.id)} > ol.reports > li.report`).first().waitFor({ state: 'attached' });
    // The usage of the root's two steps, and of the forest below it.
    await page.locator(`${agentNode(forest.root.id)} > .row .usage:text-matches("^2 steps .*subtree 9 steps")`).waitFor();
    await screenshot(page, 'forest-view');

    await nameButton(page, forest.root.id).click();
    const panel = page.locator(`aside.session-panel[data-agent-id=${JSON.stringify(forest.root.id)}]`);
    await panel.locator('li.entry.turn-end').waitFor();
    const types = await panel.locator('li.entry').evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-type')));
    expect(types.slice(0, 4)).toEqual(['turn-start', 'message', 'step-start', 'message']);
    expect(await panel.locator('li.entry.role-user .text').first().textContent()).toMatch(/^Survey recent work on long-term memory/);
    expect(await panel.locator('li.entry.role-assistant .tool-name').allTextContents()).toEqual(['→ spawn_subagent', '→ spawn_subagent', '→ spawn_subagent']);
    expect(await panel.locator('li.entry.role-assistant .args').first().textContent()).toContain('"label": "papers"');
    expect(await panel.locator('li.entry.role-tool .who .role').first().textContent()).toBe('Tool result: spawn_subagent');
    expect(await panel.locator('li.entry.role-assistant .usage').first().textContent()).toBe('812 prompt + 164 completion tokens · $0.0027');
    const reports = panel.locator('li.entry.source-subagent-report');
    expect(await reports.count()).toBe(3);
    expect(await reports.first().locator('.who').textContent()).toMatch(/^Report from papers/);
    expect(await reports.first().locator('.text').textContent()).toBe('Three lines of work stand out: episodic stores with reflection, hierarchical summaries, and learned retrieval over past trajectories.');
    expect(await panel.locator('li.entry.turn-end .divider span').textContent()).toBe('Turn completed');
    // Raw JSON one click away.
    await panel.locator('li.entry.turn-start details.raw summary').click();
    // The JSON is written on the details' toggle event, which comes a task after the click.
    const raw = panel.locator('li.entry.turn-start pre.raw-json').filter({ hasText: /\S/ });
    await raw.waitFor();
    expect(JSON.parse((await raw.textContent()) ?? '')).toMatchObject({ seq: 1, type: 'turn-start' });

    // A child still at work: its next entries join the open transcript as they are committed.
    await nameButton(page, forest.openProblems.id).click();
    const childPanel = page.locator(`aside.session-panel[data-agent-id=${JSON.stringify(forest.openProblems.id)}]`);
    await childPanel.locator('li.entry.role-tool').waitFor();
    const shown = await childPanel.locator('li.entry').count();
    await step(forest.openProblems, { content: 'All three problems are in my report.', usage: usage(520, 11) });
    await childPanel.locator('li.entry.turn-end').waitFor();
    // The step, the answer, the turn's end and the child settling: whatever the log holds, once.
    const log = await waitForSession(api, forest.openProblems.id, 'the child to settle', (entries) => entries.at(-1)?.type === 'activation');
    expect(log.length).toBeGreaterThan(shown);
    await childPanel.locator('li.entry').nth(log.length - 1).waitFor();
    expect(await childPanel.locator('li.entry').count()).toBe(log.length);
    const seqs = await childPanel.locator('li.entry').evaluateAll((nodes) => nodes.map((n) => Number(n.getAttribute('data-seq'))));
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    await nameButton(page, forest.papers.id).click();
    await page.locator(`aside.session-panel[data-agent-id=${JSON.stringify(forest.papers.id)}] li.entry.source-subagent-report`).waitFor();
    await screenshot(page, 'session');
    expect(pageFaults(errors)).toEqual([]);
  });

  it('pages through a long session with Load more, each entry once and in order', async () => {
    const root = await createRoot('long');
    for (let i = 0; i < 230; i++) await api.send(root.id, `note ${i + 1}`, 'inject');
    const { page, errors } = await openPage(browser, `${server.url}/ui/forests/${root.id}`, { key: KEY });
    await nameButton(page, root.id).click();
    const panel = page.locator('aside.session-panel');
    await panel.locator('li.entry').nth(199).waitFor();
    await panel.locator('button.more').waitFor();
    expect(await panel.locator('li.entry').count()).toBe(200);
    await panel.locator('button.more').click();
    await panel.locator('li.entry').nth(229).waitFor();
    await panel.locator('button.more').waitFor({ state: 'hidden' });
    const texts = await panel.locator('li.entry .text').allTextContents();
    expect(texts).toEqual(Array.from({ length: 230 }, (_, i) => `note ${i + 1}`));
    expect(pageFaults(errors)).toEqual([]);
  });

  it('escapes what agents write: markup in a label and a report stays text', async () => {
    const root = await createRoot('escape');
    const child = await startChild(root, '<img src=x onerror="window.__pwned=1">');
    const { page, errors } = await openPage(browser, `${server.url}/ui/forests/${root.id}`, { key: KEY });
    await page.locator(childNode(root.id, child.id)).waitFor();
    const sent = await report(api, child, '<script>window.__pwned=2</script><b>bold</b>');
    await page.locator(reportNode(root.id, sent)).waitFor({ state: 'attached' });
    expect(await page.locator(`${agentNode(child.id)} > .row .name`).textContent()).toBe('<img src=x onerror="window.__pwned=1">');
    expect(await page.locator(`${reportNode(root.id, sent)} .report-text`).textContent()).toBe('<script>window.__pwned=2</script><b>bold</b>');
    expect(await page.locator('main img, main script, main b').count()).toBe(0);
    expect(await page.evaluate('window.__pwned')).toBeUndefined();
    expect(pageFaults(errors)).toEqual([]);
  });
});
