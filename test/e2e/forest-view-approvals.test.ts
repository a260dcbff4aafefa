/**
 * Approvals in the forest view, in a real browser against a real server with an operator key:
 * a call an approval rule asks about shows on every page open on its forest without a reload
 * (the asking agent's path, the tool, the input as text, its age); Approve on one page runs the
 * call and clears it from both; the start page counts the approvals waiting per forest; Deny
 * with a reason gives the model the person's words; a decision the service refuses (the
 * approval ended meanwhile) says so on the approval's row.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Approval, OutputResult } from '../../src/contract/index.js';
import { KEY_STORAGE_NAME, launchBrowser, openPage } from '../fixtures/browser.js';
import { startLabelledChild, stepWith } from '../fixtures/research-forest.js';
import { join } from 'node:path';
import { tempDir } from '../fixtures/cleanup.js';
import { uniqueId, waitForSession } from '../fixtures/scenario-steps.js';
import { ServerClient, startServer, stopLeftoverServers, type AgentRef, type RunningServer } from '../fixtures/server-process.js';
import type { Entry } from '../fixtures/wire.js';

const KEY = 'forest-view-approvals-key';

const approvalRow = (id: string): string => `section.approvals li.approval[data-approval-id=${JSON.stringify(id)}]`;
const rootRow = (id: string): string => `tr.root[data-agent-id=${JSON.stringify(id)}]`;

/** Chromium logs every non-2xx fetch as a console error; the page expects some (a 409 here). */
const pageFaults = (errors: readonly string[]): string[] => errors.filter((e) => !e.includes('Failed to load resource'));

const toolResult = (entries: readonly Entry[], callId: string): Entry | undefined =>
  entries.find((e) => e.type === 'message' && e.role === 'tool' && e.toolCallId === callId);

describe('approvals in the forest view', () => {
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

  /** A root whose forest asks a person about every spawn_subagent. */
  const askingRoot = async (prefix: string): Promise<AgentRef> => {
    const root = await api.createRoot({ id: uniqueId(prefix), instructions: 'You coordinate research.' });
    await api.expect(200, 'PUT', `/v1/approval-rules/${root.id}-spawns`, { body: { tool: 'spawn_subagent', rootId: root.id, decision: 'ask' } });
    return root;
  };

  /** `agent`'s open turn takes a step that calls spawn_subagent; returns the approval it waits on. */
  const askToSpawn = async (agent: AgentRef, callId: string, input: Record<string, unknown>): Promise<Approval> => {
    const out: OutputResult = await stepWith(api, agent, { toolCalls: [{ id: callId, name: 'spawn_subagent', input }] });
    expect(out.awaiting).toEqual([]);
    expect(out.approvals).toHaveLength(1);
    return out.approvals![0]!;
  };

  const openForest = async (rootId: string) => {
    const opened = await openPage(browser, `${server.url}/ui/forests/${rootId}`, { key: KEY });
    await opened.page.locator('.stream-state[data-state=live]').waitFor();
    return opened;
  };

  const expectShown = async (page: Page, approval: Approval, path: string) => {
    const row = page.locator(approvalRow(approval.id));
    await row.waitFor();
    expect(await row.locator('.approval-path').textContent()).toBe(path);
    expect(await row.locator('.approval-tool').textContent()).toBe('spawn_subagent');
    expect(JSON.parse((await row.locator('pre.approval-input').textContent()) ?? '')).toEqual(approval.input);
    expect(await row.locator('.approval-age').textContent()).toMatch(/^waiting \d+ (s|min)$/);
    expect(await row.locator('.approval-age').getAttribute('datetime')).toBe(approval.requestedAt);
  };

  it('shows a pending approval on every open page live; Approve on one runs the call and clears it from both; the start page counts it', async () => {
    const root = await askingRoot('approve');
    const first = await openForest(root.id);
    const second = await openForest(root.id);
    expect(await first.page.locator('section.approvals').isVisible()).toBe(false);

    await api.send(root.id, 'research this');
    // Markup in the input stays text.
    const input = { label: 'helper', prompt: '<img src=x onerror="window.__pwned=1"> look into it' };
    const asked = await askToSpawn(root, 'c1', input);
    for (const { page } of [first, second]) {
      await expectShown(page, asked, root.id);
      expect(await page.locator('section.approvals .approvals-count').textContent()).toBe('1');
    }
    expect(await first.page.locator('main img').count()).toBe(0);
    expect(await first.page.evaluate('window.__pwned')).toBeUndefined();

    // The start page: the count beside the forest.
    const start = await openPage(browser, `${server.url}/ui`, { key: KEY });
    const badge = start.page.locator(`${rootRow(root.id)} .approvals-badge`);
    await badge.waitFor();
    expect(await badge.textContent()).toBe('1 approval waiting');
    expect(await badge.getAttribute('data-count')).toBe('1');

    await first.page.locator(`${approvalRow(asked.id)} button.approve`).click();
    for (const { page } of [first, second]) await page.locator(approvalRow(asked.id)).waitFor({ state: 'detached' });
    for (const { page } of [first, second]) await page.locator('section.approvals').waitFor({ state: 'hidden' });

    // The call ran: the child exists and the session has the call's result.
    const entries = await waitForSession(api, root.id, 'the approved call\'s result', (log) => toolResult(log, 'c1') !== undefined);
    expect(toolResult(entries, 'c1')!.isError).toBeUndefined();
    const children = await api.expect<{ items: { id: string; label?: string }[] }>(200, 'GET', `/v1/agents?parentId=${root.id}`);
    expect(children.items.map((c) => c.label)).toEqual(['helper']);
    expect(await api.expect<Approval>(200, 'GET', `/v1/approvals/${asked.id}`)).toMatchObject({ state: 'approved' });

    // Refreshed, the start page counts none.
    await start.page.locator('.start .page-head button:text-is("Refresh")').click();
    await badge.waitFor({ state: 'detached' });
    await start.page.locator(rootRow(root.id)).waitFor();
    for (const { errors } of [first, second, start]) expect(pageFaults(errors)).toEqual([]);
  });

  it('denies with a reason from the page: the model reads "a person denied the call" with the reason; the path names the child that asked', async () => {
    const root = await askingRoot('deny');
    const child = await startLabelledChild(api, root, 'papers');
    const { page, errors } = await openForest(root.id);

    const asked = await askToSpawn(child, 'c-deny', { prompt: 'go deeper' });
    expect(asked.path).toEqual([root.id, child.id]);
    await expectShown(page, asked, `${root.id} / ${child.id}`);

    // The path opens the asking agent's session: the call waits for a person there.
    const row = page.locator(approvalRow(asked.id));
    await row.locator('.approval-path').click();
    const transcript = page.locator(`aside.session-panel[data-agent-id=${JSON.stringify(child.id)}] ol.transcript`);
    await transcript.locator('li.entry.approval .note > span:text-is("spawn_subagent waits for a person\'s approval")').waitFor();

    await row.locator('input.approval-reason').fill('not without a budget');
    await row.locator('button.deny').click();
    await row.waitFor({ state: 'detached' });

    const denial = 'Error: a person denied the call to spawn_subagent: not without a budget';
    const entries = await waitForSession(api, child.id, 'the denied call\'s result', (log) => toolResult(log, 'c-deny') !== undefined);
    expect(toolResult(entries, 'c-deny')).toMatchObject({ isError: true, content: [{ type: 'text', text: denial }] });
    // The open transcript follows: the decision and the result, every entry once and in order.
    await transcript.locator('li.entry.approval .note > span:text-is("A person denied spawn_subagent: not without a budget")').waitFor();
    await transcript.locator('li.entry.role-tool.error .text').filter({ hasText: denial }).waitFor();
    await transcript.locator('li.entry').nth(entries.length - 1).waitFor();
    const seqs = await transcript.locator('li.entry').evaluateAll((nodes) => nodes.map((n) => Number(n.getAttribute('data-seq'))));
    expect(seqs).toEqual(entries.map((e) => e.seq));
    expect(await page.locator('aside.session-panel button.more').isVisible()).toBe(false);
    expect(await api.expect<Approval>(200, 'GET', `/v1/approvals/${asked.id}`)).toMatchObject({ state: 'denied', reason: 'not without a budget' });
    expect((await api.expect<{ items: unknown[] }>(200, 'GET', `/v1/agents?parentId=${child.id}`)).items).toEqual([]);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('shows a decision the service refuses on the approval\'s row: one decided elsewhere while this page heard nothing is 409 APPROVAL_DECIDED', async () => {
    const root = await askingRoot('refused');
    await api.send(root.id, 'research this');
    const asked = await askToSpawn(root, 'c1', { prompt: 'look into it' });
    // This page's forest stream never connects: it knows the approval from the inbox alone, and
    // hears nothing of the decision taken below.
    const opened = await openPage(browser, 'about:blank');
    await opened.page.route('**/events?forest=true*', (route) => route.abort());
    await opened.context.addInitScript(`sessionStorage.setItem(${JSON.stringify(KEY_STORAGE_NAME)}, ${JSON.stringify(KEY)})`);
    await opened.page.goto(`${server.url}/ui/forests/${root.id}`);
    const { page, errors } = opened;
    await expectShown(page, asked, root.id);

    await api.expect(200, 'POST', `/v1/approvals/${asked.id}/decision`, { body: { decision: 'deny' } });
    const row = page.locator(approvalRow(asked.id));
    await row.locator('button.approve').click();
    await row.locator('.approval-error').filter({ hasText: /^Not approved: .*\(APPROVAL_DECIDED\)$/ }).waitFor();
    expect(await row.locator('button.approve').isDisabled()).toBe(true);
    expect(await row.locator('button.deny').isDisabled()).toBe(true);
    expect(await api.expect<Approval>(200, 'GET', `/v1/approvals/${asked.id}`)).toMatchObject({ state: 'denied' });
    expect(pageFaults(errors)).toEqual([]);
  });

  it('lists the approvals of a forest no instance runs (restarted, not resumed), which can be decided there and are acted on at the resume', async () => {
    const dataPath = join(tempDir('forest-view-approvals-'), 'agentforest.db');
    const first = await startServer({ dataPath, env: { AGENTFOREST_API_KEYS: KEY } });
    const firstApi = new ServerClient(first, KEY);
    const root = await firstApi.createRoot({ id: uniqueId('stopped') });
    await firstApi.expect(200, 'PUT', `/v1/approval-rules/${root.id}-spawns`, { body: { tool: 'spawn_subagent', rootId: root.id, decision: 'ask' } });
    await firstApi.send(root.id, 'research this');
    const out: OutputResult = await stepWith(firstApi, root, { toolCalls: [{ id: 'c1', name: 'spawn_subagent', input: { prompt: 'look into it' } }] });
    const asked = out.approvals![0]!;
    expect(await first.stop('SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });
    const second = await startServer({ dataPath, env: { AGENTFOREST_API_KEYS: KEY } });
    const secondApi = new ServerClient(second, KEY);

    const { page, errors } = await openPage(browser, `${second.url}/ui/forests/${root.id}`, { key: KEY });
    await page.getByText(`No live root "${root.id}"`).waitFor();
    await expectShown(page, asked, root.id);
    await page.locator(approvalRow(asked.id)).locator('button.approve').click();
    await page.locator(approvalRow(asked.id)).waitFor({ state: 'detached' });
    expect(await secondApi.expect<Approval>(200, 'GET', `/v1/approvals/${asked.id}`)).toMatchObject({ state: 'approved' });

    const resumed = await secondApi.resume(root.id);
    const next = await secondApi.claim(resumed, 10_000);
    expect(next?.messages?.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c1' });
    expect(next?.spawned).toHaveLength(1);
    expect(pageFaults(errors)).toEqual([]);
  });
});
