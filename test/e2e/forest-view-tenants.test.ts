/**
 * The forest view with a tenant key, in a real browser against a real server: the start page
 * lists that tenant's roots only, its own forest draws, and another tenant's forest reads as a
 * root that does not exist.
 */
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, openPage } from '../fixtures/browser.js';
import { uniqueId } from '../fixtures/scenario-steps.js';
import { ServerClient, startServer, stopLeftoverServers, type RunningServer } from '../fixtures/server-process.js';

const ADMIN = 'forest-view-tenants-admin-key';

const rootRow = (id: string): string => `tr.root[data-agent-id=${JSON.stringify(id)}]`;
/** Chromium logs every non-2xx fetch as a console error; the page expects a 404 here. */
const pageFaults = (errors: readonly string[]): string[] => errors.filter((e) => !e.includes('Failed to load resource'));

describe('the forest view with a tenant key', () => {
  let server: RunningServer;
  let admin: ServerClient;
  let browser: Browser;

  beforeAll(async () => {
    server = await startServer({ dataPath: ':memory:', env: { AGENTFOREST_API_KEYS: ADMIN } });
    admin = new ServerClient(server, ADMIN);
    browser = await launchBrowser();
  });

  afterAll(async () => {
    await browser?.close();
    await stopLeftoverServers();
  });

  const tenant = async (prefix: string): Promise<{ key: string; api: ServerClient }> => {
    const id = uniqueId(prefix).toLowerCase().replace(/[^a-z0-9-]/g, '-');
    await admin.expect(201, 'POST', '/v1/tenants', { body: { id } });
    const { key } = await admin.expect<{ key: string }>(201, 'POST', `/v1/tenants/${id}/keys`);
    return { key, api: new ServerClient(server, key) };
  };

  it("shows a tenant its own forests and answers another tenant's as one that does not exist", async () => {
    const acme = await tenant('acme');
    const globex = await tenant('globex');
    const mine = await acme.api.createRoot({ id: uniqueId('acme-root') });
    const theirs = await globex.api.createRoot({ id: uniqueId('globex-root') });
    const { page, errors } = await openPage(browser, `${server.url}/ui`, { key: acme.key });
    await page.locator(rootRow(mine.id)).waitFor();
    expect(await page.locator(rootRow(theirs.id)).count()).toBe(0);

    await page.goto(`${server.url}/ui/forests/${theirs.id}`);
    expect(await page.locator('.page-message h1').textContent()).toBe(`No live root "${theirs.id}"`);
    await page.goto(`${server.url}/ui/forests/${mine.id}`);
    await page.locator(`li.agent[data-agent-id=${JSON.stringify(mine.id)}]`).waitFor();
    expect(pageFaults(errors)).toEqual([]);
  });
});
