/**
 * The forest view's "Not running" list in a real browser, against a real server restarted on
 * one SQLite file: after a SIGKILL, the roots there are to resume are listed with whether a
 * turn was left open; Resume (with the operator key) makes one live, and it moves to the live
 * list; a refusal shows the service's message and code on the row; a long list pages with
 * "Show more".
 */
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, openPage } from '../fixtures/browser.js';
import { tempDir } from '../fixtures/cleanup.js';
import { ServerClient, startServer, stopLeftoverServers, type RunningServer } from '../fixtures/server-process.js';

const KEY = 'forest-view-resume-key';

const stoppedRow = (id: string): string => `section.not-running tr.stopped-root[data-agent-id=${JSON.stringify(id)}]`;
const liveRow = (id: string): string => `tr.root[data-agent-id=${JSON.stringify(id)}]`;

/** Chromium logs every non-2xx fetch as a console error; a refused resume is one. */
const pageFaults = (errors: readonly string[]): string[] => errors.filter((e) => !e.includes('Failed to load resource'));

describe('the roots that are not running, in the forest view', { timeout: 60_000 }, () => {
  let server: RunningServer;
  let api: ServerClient;
  let browser: Browser;

  beforeAll(async () => {
    const data = join(tempDir('agentforest-view-resume-'), 'agentforest.db');
    const first = await startServer({ dataPath: data, env: { AGENTFOREST_API_KEYS: KEY } });
    const before = new ServerClient(first, KEY);
    const crashed = await before.createRoot({ id: 'crashed-mid-turn' });
    await before.send(crashed.id, 'a question the process dies on');
    expect(await before.claim(crashed, 5_000)).not.toBeNull();
    await before.createRoot({ id: 'stopped-idle' });
    await first.stop('SIGKILL');

    server = await startServer({ dataPath: data, env: { AGENTFOREST_API_KEYS: KEY } });
    api = new ServerClient(server, KEY);
    browser = await launchBrowser();
  });

  afterAll(async () => {
    await browser?.close();
    await stopLeftoverServers();
  });

  it('lists the roots to resume under "Not running", and Resume with the operator key makes one live: it moves to the live list', async () => {
    const { page, errors, requests } = await openPage(browser, `${server.url}/ui`);
    // No key in this tab yet: the page asks for one before it can list anything.
    await page.locator('dialog.key-dialog[open] input[name=key]').fill(KEY);
    await page.locator('dialog.key-dialog[open] button[type=submit]').click();

    await page.locator(stoppedRow('crashed-mid-turn')).waitFor();
    expect(await page.locator('section.not-running h2').textContent()).toBe('Not running');
    expect(await page.locator('section.not-running tr.stopped-root').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-agent-id')))).toEqual(['crashed-mid-turn', 'stopped-idle']);
    expect(await page.locator(`${stoppedRow('crashed-mid-turn')} td.turn`).textContent()).toBe('left open');
    expect(await page.locator(`${stoppedRow('stopped-idle')} td.turn`).textContent()).toBe('');
    expect(await page.locator('.roots-body .placeholder').textContent()).toMatch(/^No live roots/);

    await page.locator(`${stoppedRow('crashed-mid-turn')} button.resume`).click();
    await page.locator(liveRow('crashed-mid-turn')).waitFor();
    await page.locator(stoppedRow('crashed-mid-turn')).waitFor({ state: 'detached' });
    // Its turn went on where the process stopped: the live list shows it running.
    expect(await page.locator(`${liveRow('crashed-mid-turn')} .status`).textContent()).toBe('running');
    expect(await page.locator(`${liveRow('crashed-mid-turn')} a`).getAttribute('href')).toBe('/ui/forests/crashed-mid-turn');
    await page.locator(stoppedRow('stopped-idle')).waitFor();

    const live = await api.expect<{ id: string; status: string }>(200, 'GET', '/v1/agents/crashed-mid-turn');
    expect(live).toMatchObject({ id: 'crashed-mid-turn', status: 'running' });
    const notRunning = await api.expect<{ items: { id: string }[] }>(200, 'GET', '/v1/agents?live=false');
    expect(notRunning.items.map((r) => r.id)).toEqual(['stopped-idle']);
    const resumes = requests.filter((r) => r.url.endsWith('/v1/agents/crashed-mid-turn/resume'));
    expect(resumes.map((r) => r.headers.authorization)).toEqual([`Bearer ${KEY}`]);
    for (const { url } of requests) expect(url).not.toContain(KEY);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('shows a refused resume on its row, with the service\'s message and code, and Refresh then shows where the root is', async () => {
    const { page, errors } = await openPage(browser, `${server.url}/ui`, { key: KEY });
    await page.locator(stoppedRow('stopped-idle')).waitFor();
    // Resumed behind the page's back: the page's own resume is refused.
    await api.resume('stopped-idle');
    await page.locator(`${stoppedRow('stopped-idle')} button.resume`).click();
    const refusal = page.locator(`${stoppedRow('stopped-idle')} .resume-error`);
    await refusal.filter({ hasText: /\S/ }).waitFor();
    expect(await refusal.textContent()).toBe('Not resumed: agent "stopped-idle" is already live (AGENT_EXISTS)');
    expect(await page.locator(`${stoppedRow('stopped-idle')} button.resume`).isEnabled()).toBe(true);

    await page.locator('.page-head button', { hasText: 'Refresh' }).click();
    await page.locator(liveRow('stopped-idle')).waitFor();
    await page.locator(stoppedRow('stopped-idle')).waitFor({ state: 'detached' });
    expect(pageFaults(errors)).toEqual([]);
  });

  it('pages a long list with "Show more", each root once and in creation order', async () => {
    const ids = Array.from({ length: 60 }, (_, i) => `disposed-${String(i + 1).padStart(2, '0')}`);
    for (const id of ids) {
      await api.createRoot({ id });
      await api.expect(202, 'DELETE', `/v1/agents/${id}`, { body: {} });
    }
    const expected = (await api.expect<{ items: { id: string }[] }>(200, 'GET', '/v1/agents?live=false&limit=1000')).items.map((r) => r.id);
    expect(expected.filter((id) => id.startsWith('disposed-'))).toEqual(ids);

    const { page, errors } = await openPage(browser, `${server.url}/ui`, { key: KEY });
    const rows = page.locator('section.not-running tr.stopped-root');
    await rows.nth(49).waitFor();
    expect(await rows.count()).toBe(50);
    await page.locator('section.not-running button.more').click();
    await rows.nth(expected.length - 1).waitFor();
    await page.locator('section.not-running button.more').waitFor({ state: 'hidden' });
    expect(await rows.evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-agent-id')))).toEqual(expected);
    expect(pageFaults(errors)).toEqual([]);
  });
});
