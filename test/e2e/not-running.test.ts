/**
 * `GET /v1/agents?live=false` over real HTTP, across a restart on one SQLite file: after a
 * SIGKILL the durable roots that are not live are listed, paged like the live list, each with
 * when its session last wrote and whether a turn was left open; resuming one takes it off the
 * list and into the live one, disposing it puts it back. Operator key only; the filters that do
 * not apply to a root that is not live are refused by name.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ErrorBody } from '../../src/contract/index.js';
import { tempDir } from '../fixtures/cleanup.js';
import { startLabelledChild } from '../fixtures/research-forest.js';
import { ServerClient, startServer, stopLeftoverServers, type RunningServer } from '../fixtures/server-process.js';

const KEY = 'not-running-test-key';

interface NotRunning {
  id: string;
  label?: string;
  createdAt: string;
  lastEntryAt: string;
  openTurn: boolean;
}

interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

describe('the roots that are not live, after a restart', { timeout: 60_000 }, () => {
  let second: RunningServer;
  let api: ServerClient;
  /** The roots the first server created, in creation order, and the token of one of them. */
  const roots = ['nr-finished', 'nr-open-turn', 'nr-quiet', 'nr-disposed'];
  let openRootToken: string;

  beforeAll(async () => {
    const data = join(tempDir('agentforest-not-running-'), 'agentforest.db');
    const first = await startServer({ dataPath: data, env: { AGENTFOREST_API_KEYS: KEY } });
    const before = new ServerClient(first, KEY);
    const finished = await before.createRoot({ id: 'nr-finished' });
    await before.runTurn(finished, 'a question', 'an answer');
    await startLabelledChild(before, finished, 'a child is not a root');
    const open = await before.createRoot({ id: 'nr-open-turn' });
    openRootToken = open.token;
    await before.send(open.id, 'a question the process dies on');
    expect(await before.claim(open, 5_000)).not.toBeNull();
    await before.createRoot({ id: 'nr-quiet' });
    await before.createRoot({ id: 'nr-disposed' });
    await before.expect(202, 'DELETE', '/v1/agents/nr-disposed', { body: {} });
    // Live when the process dies: nothing closes the open turn.
    await first.stop('SIGKILL');

    second = await startServer({ dataPath: data, env: { AGENTFOREST_API_KEYS: KEY } });
    api = new ServerClient(second, KEY);
  });

  // The second server outlived every run of this file (a process left behind per `npm test`).
  afterAll(async () => {
    await stopLeftoverServers();
  });

  /** Every page of `path`, following nextCursor. */
  async function everyPage(path: string, limit: number): Promise<Page<NotRunning>[]> {
    const pages: Page<NotRunning>[] = [];
    let cursor: string | null = null;
    do {
      const page: Page<NotRunning> = await api.expect(200, 'GET', `${path}&limit=${limit}${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
      pages.push(page);
      cursor = page.nextCursor;
    } while (cursor !== null);
    return pages;
  }

  it('lists every durable root, none of them live, in creation order and in pages, with its last entry time and whether its turn was left open', async () => {
    expect(await api.expect<Page<unknown>>(200, 'GET', '/v1/agents')).toEqual({ items: [], nextCursor: null });

    const pages = await everyPage('/v1/agents?live=false', 3);
    expect(pages.map((p) => p.items.map((r) => r.id))).toEqual([roots.slice(0, 3), roots.slice(3)]);
    expect(pages[0]!.nextCursor).not.toBeNull();
    const whole = await api.expect<Page<NotRunning>>(200, 'GET', '/v1/agents?live=false');
    expect(whole.nextCursor).toBeNull();
    expect(whole.items).toEqual(pages.flatMap((p) => p.items));

    for (const root of whole.items) {
      const session = await api.expect<{ header: { createdAt: string }; entries: { at: string }[] }>(200, 'GET', `/v1/agents/${root.id}/session?limit=1000`);
      expect(root).toStrictEqual({
        id: root.id,
        createdAt: session.header.createdAt,
        lastEntryAt: session.entries.at(-1)?.at ?? session.header.createdAt,
        openTurn: root.id === 'nr-open-turn',
      });
    }
    const finished = await api.expect<{ entries: { type: string }[] }>(200, 'GET', '/v1/agents/nr-finished/session?limit=1000');
    expect(finished.entries.map((e) => e.type)).toContain('turn-end');
    expect(whole.items.find((r) => r.id === 'nr-quiet')?.lastEntryAt).toBe(whole.items.find((r) => r.id === 'nr-quiet')?.createdAt);
  });

  it('keeps the live list as it was when live is true', async () => {
    const resumed = await api.resume('nr-quiet');
    try {
      const absent = await fetch(`${second.url}/v1/agents?limit=5`, { headers: { authorization: `Bearer ${KEY}` } });
      const liveTrue = await fetch(`${second.url}/v1/agents?limit=5&live=true`, { headers: { authorization: `Bearer ${KEY}` } });
      const text = await absent.text();
      expect(await liveTrue.text()).toBe(text);
      expect(JSON.parse(text)).toMatchObject({ items: [{ id: resumed.id, kind: 'root', status: 'idle' }], nextCursor: null });
    } finally {
      await api.expect(202, 'DELETE', `/v1/agents/${resumed.id}`, { body: {} });
    }
  });

  it('takes a resumed root off the list and into the live one, and lists it again once it is disposed', async () => {
    const listed = async (): Promise<string[]> => (await api.expect<Page<NotRunning>>(200, 'GET', '/v1/agents?live=false')).items.map((r) => r.id);
    expect(await listed()).toContain('nr-open-turn');

    const resumed = await api.resume('nr-open-turn');
    expect(resumed.token).not.toBe(openRootToken);
    expect(await listed()).not.toContain('nr-open-turn');
    const live = await api.expect<Page<{ id: string }>>(200, 'GET', '/v1/agents?kind=root');
    expect(live.items.map((r) => r.id)).toEqual(['nr-open-turn']);
    // Its open turn went on: the step the process died in is claimable again.
    expect(await api.claim(resumed, 5_000)).not.toBeNull();

    await api.expect(202, 'DELETE', '/v1/agents/nr-open-turn', { body: {} });
    const after = await api.expect<Page<NotRunning>>(200, 'GET', '/v1/agents?live=false');
    // Disposing closed the turn it had open.
    expect(after.items.find((r) => r.id === 'nr-open-turn')).toMatchObject({ openTurn: false });
    expect(after.items.map((r) => r.id)).toEqual(roots);
    await api.resume('nr-open-turn');
    await api.expect(202, 'DELETE', '/v1/agents/nr-open-turn', { body: {} });
  });

  it('answers only the operator key', async () => {
    const none = await api.request<ErrorBody>('GET', '/v1/agents?live=false', { key: null });
    expect(none.status).toBe(401);
    expect(none.body).toMatchObject({ code: 'UNAUTHENTICATED' });
    const resumed = await api.resume('nr-finished');
    try {
      const agentOnly = await api.request<ErrorBody>('GET', '/v1/agents?live=false', { key: null, token: resumed.token });
      expect(agentOnly.status).toBe(401);
      expect(agentOnly.body).toMatchObject({ code: 'UNAUTHENTICATED' });
    } finally {
      await api.expect(202, 'DELETE', `/v1/agents/${resumed.id}`, { body: {} });
    }
  });

  it('refuses the filters that do not apply to a root that is not live, naming them, and a cursor it did not give', async () => {
    const refused = async (query: string): Promise<string> => {
      const answer = await api.request<ErrorBody>('GET', `/v1/agents?${query}`);
      expect(answer.status).toBe(400);
      expect(answer.body.code).toBe('VALIDATION');
      return answer.body.message;
    };
    expect(await refused('live=false&parentId=nr-finished')).toBe('live=false lists the roots that are not live and takes only limit and cursor; leave out parentId');
    expect(await refused('live=false&status=idle&kind=root')).toBe('live=false lists the roots that are not live and takes only limit and cursor; leave out status, kind');
    expect(await refused('live=false&cursor=not-a-cursor')).toBe('cursor is not a cursor this service returned');
    expect(await refused('live=maybe')).toMatch(/live/);
    expect(await refused('live=false&limit=0')).toMatch(/limit/);
  });
});
