/**
 * The forest view shows what a driven agent's model is writing while it writes: the page asks
 * the forest stream for deltas (`deltas=true`), and the open session shows a draft under the
 * transcript that grows with each piece, tool calls with their arguments growing too, one
 * draft per step attempt, started again when a broken model stream is retried (`reset`), and
 * replaced by the committed assistant message with no second bubble. A page opened after the
 * step gets the committed text only: deltas are never replayed.
 *
 * The scripted model streams each answer in 4-character chunks and holds chunk i until the test
 * lets it through (`pacing.beforeChunk`), after the page showed the chunk before: every
 * intermediate length is seen, and none is skipped, however fast the page or the server.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lastMessage, type Pacing, type Reply } from '../../demo/scripted-model.js';
import { launchBrowser, openPage, KEY_STORAGE_NAME, type OpenedPage } from '../fixtures/browser.js';
import { startCuttableProxy } from '../fixtures/cuttable-proxy.js';
import { startModelServer } from '../fixtures/model-server.js';
import { uniqueId, waitForSession } from '../fixtures/scenario-steps.js';
import { ServerClient, startServer, stopLeftoverServers, type AgentRef, type RunningServer } from '../fixtures/server-process.js';
import type { Entry } from '../fixtures/wire.js';

const KEY = 'forest-view-deltas-key';
const PIECE = 4;
const TEXT = 'Rings grow one season at a time, and the forest keeps count.';

const agentNode = (id: string): string => `li.agent[data-agent-id=${JSON.stringify(id)}]`;
const panelOf = (id: string): string => `aside.session-panel[data-agent-id=${JSON.stringify(id)}]`;
const draftOf = (id: string): string => `${panelOf(id)} ol.drafting > li.draft`;
const committedAnswers = (id: string): string => `${panelOf(id)} ol.transcript > li.entry.role-assistant`;

/** Chromium logs every non-2xx fetch as a console error; the page expects 401s (and drops). */
const pageFaults = (errors: readonly string[]): string[] => errors.filter((e) => !e.includes('Failed to load resource'));

/** An answer's chunks held back: chunk i is sent once `letThrough(n)` with n > i was called. */
function valve(): { pacing: Pacing; letThrough: (chunks: number) => void } {
  let allowed = 0;
  const held = new Map<number, () => void>();
  const letThrough = (chunks: number): void => {
    allowed = Math.max(allowed, chunks);
    for (const [i, release] of held) {
      if (i >= allowed) continue;
      held.delete(i);
      release();
    }
  };
  const beforeChunk = (i: number): Promise<void> | void => (i < allowed ? undefined : new Promise<void>((resolve) => held.set(i, resolve)));
  return { pacing: { pieceChars: PIECE, beforeChunk }, letThrough };
}

/**
 * Records the body of every event stream the page opens, as it arrives, in
 * `window.eventStreams` (the page's fetch, teed): what the service sent the page, deltas included.
 */
const RECORD_EVENT_STREAMS = `(() => {
  const streams = [];
  window.eventStreams = streams;
  const original = window.fetch;
  window.fetch = async (input, init) => {
    const response = await original(input, init);
    const url = typeof input === 'string' ? input : input.url;
    if (!url.includes('/events') || response.body === null) return response;
    const [page, copy] = response.body.tee();
    const record = { url, text: '' };
    streams.push(record);
    copy.pipeThrough(new TextDecoderStream()).pipeTo(new WritableStream({ write: (text) => { record.text += text; } })).catch(() => undefined);
    return new Response(page, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
})()`;

interface RecordedStream {
  url: string;
  text: string;
}

/** The parts of the page's globals these tests read (this project's TypeScript knows no DOM). */
interface PageGlobals {
  document: { querySelector(selector: string): { textContent: string | null } | null };
  eventStreams: RecordedStream[];
}

function eventStreams(page: Page): Promise<RecordedStream[]> {
  return page.evaluate(() => (globalThis as unknown as PageGlobals).eventStreams);
}

/** Waits until `selector`'s first element shows exactly `text`; fails saying what it showed. */
async function shows(page: Page, selector: string, text: string): Promise<void> {
  const showing = ({ selector, text }: { selector: string; text: string }): boolean =>
    (globalThis as unknown as PageGlobals).document.querySelector(selector)?.textContent === text;
  await page.waitForFunction(showing, { selector, text }).catch(async (error: unknown) => {
    const shown = await page.locator(selector).allTextContents();
    throw new Error(`${selector} never showed ${JSON.stringify(text)}; it shows ${JSON.stringify(shown)}`, { cause: error });
  });
}

const stepStarts = (entries: readonly Entry[]): Entry[] => entries.filter((e) => e.type === 'step-start');
const turnEnded = (entries: readonly Entry[]): boolean => entries.some((e) => e.type === 'turn-end');

describe('the forest view shows driven agents writing', () => {
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

  /** A root driven by the scripted model at `modelUrl`. */
  const drivenRoot = (prefix: string, modelUrl: string): Promise<AgentRef> =>
    api.createRoot({ id: uniqueId(prefix), instructions: 'You keep the forest\'s records.', model: { provider: 'openai-compatible', baseUrl: modelUrl, model: 'scripted-1' } });

  /** The forest's page, recording its event streams, with its stream live and `root`'s session open. */
  async function openForest(root: AgentRef): Promise<OpenedPage> {
    const opened = await openPage(browser, 'about:blank');
    await opened.context.addInitScript(`sessionStorage.setItem(${JSON.stringify(KEY_STORAGE_NAME)}, ${JSON.stringify(KEY)})`);
    await opened.context.addInitScript(RECORD_EVENT_STREAMS);
    await opened.page.goto(`${server.url}/ui/forests/${root.id}`);
    await opened.page.locator('.stream-state[data-state=live]').waitFor();
    await opened.page.locator(`${agentNode(root.id)} > .row .name`).click();
    return opened;
  }

  /** The open session was read and is empty: what comes next comes over the stream. */
  const sessionEmpty = (page: Page, root: AgentRef): Promise<void> => page.locator(`${panelOf(root.id)} .panel-state:text-is("No entries yet.")`).waitFor();

  it('grows the answer in the open session as its pieces arrive, then shows the committed message in its place, once', async () => {
    const answer = valve();
    const model = await startModelServer((): Reply => ({ answer: { content: TEXT }, pacing: answer.pacing }));
    const root = await drivenRoot('growing', model.url);
    const { page, errors } = await openForest(root);
    await sessionEmpty(page, root);

    await api.send(root.id, 'Write down the count.');
    // Chunk 0 opens the answer (its role); chunk k > 0 is the text's k-th piece.
    for (const pieces of [1, 2, 3]) {
      answer.letThrough(pieces + 1);
      await shows(page, `${draftOf(root.id)} .text`, TEXT.slice(0, pieces * PIECE));
      expect(await page.locator(draftOf(root.id)).count()).toBe(1);
      expect(await page.locator(committedAnswers(root.id)).count()).toBe(0);
    }
    // The step's bubble is the step the session started, and the tree says the agent writes.
    const [step] = stepStarts(await api.session(root.id));
    expect(await page.locator(draftOf(root.id)).getAttribute('data-step-id')).toBe(step?.stepId);
    expect(await page.locator(`${agentNode(root.id)} > .row .writing`).textContent()).toBe('writing…');

    answer.letThrough(Infinity);
    await shows(page, `${committedAnswers(root.id)} .text`, TEXT);
    expect(await page.locator(draftOf(root.id)).count()).toBe(0);
    await waitForSession(api, root.id, 'the turn to end', turnEnded);
    await page.locator(`${panelOf(root.id)} li.entry.turn-end`).waitFor();
    expect(await page.locator(committedAnswers(root.id)).count()).toBe(1);
    expect(await page.locator(`${committedAnswers(root.id)} .text`).allTextContents()).toEqual([TEXT]);
    expect(await page.locator(draftOf(root.id)).count()).toBe(0);
    await shows(page, `${agentNode(root.id)} > .row .writing`, '');

    // The page asked for deltas, and they came over its forest stream.
    const streams = (await eventStreams(page)).filter((s) => s.url.includes(`/v1/agents/${root.id}/events`));
    expect(streams.length).toBeGreaterThan(0);
    for (const { url } of streams) expect(new URL(url, server.url).searchParams.get('deltas')).toBe('true');
    expect(streams.some((s) => /^event: delta$/m.test(s.text))).toBe(true);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('shows a tool call\'s name and arguments growing, and the next step\'s answer in a bubble of its own', async () => {
    const args = JSON.stringify({ topic: 'ring counts by season' });
    const calling = valve();
    const answering = valve();
    const model = await startModelServer((request): Reply =>
      lastMessage(request)?.role === 'tool'
        ? { answer: { content: TEXT }, pacing: answering.pacing }
        : { answer: { toolCalls: [{ id: 'call-1', name: 'look_up', arguments: args }] }, pacing: calling.pacing },
    );
    const root = await drivenRoot('calling', model.url);
    const { page, errors } = await openForest(root);
    await sessionEmpty(page, root);
    await api.send(root.id, 'Look it up first.');

    // Chunk 0 opens the answer, chunk 1 names the call, chunk k > 1 is its arguments' (k-1)-th piece.
    calling.letThrough(2);
    await shows(page, `${draftOf(root.id)} .tool-name`, '→ look_up');
    for (const pieces of [1, 2, 3]) {
      calling.letThrough(pieces + 2);
      await shows(page, `${draftOf(root.id)} .args`, args.slice(0, pieces * PIECE));
    }
    await shows(page, `${agentNode(root.id)} > .row .writing`, 'writing a call to look_up…');
    const firstStep = await page.locator(draftOf(root.id)).getAttribute('data-step-id');

    calling.letThrough(Infinity);
    // The call is committed (an unknown tool: its result is an error), and the next step writes.
    await page.locator(`${committedAnswers(root.id)} .tool-name:text-is("→ look_up")`).waitFor();
    answering.letThrough(2);
    await shows(page, `${draftOf(root.id)} .text`, TEXT.slice(0, PIECE));
    const steps = stepStarts(await api.session(root.id));
    expect(steps.map((s) => s.stepId)).toEqual([firstStep, await page.locator(draftOf(root.id)).getAttribute('data-step-id')]);
    expect(await page.locator(draftOf(root.id)).count()).toBe(1);
    expect(await page.locator(`${draftOf(root.id)} .tool-call`).count()).toBe(0);

    answering.letThrough(Infinity);
    await shows(page, `${committedAnswers(root.id)} .text`, TEXT);
    expect(await page.locator(draftOf(root.id)).count()).toBe(0);
    expect(await page.locator(`${committedAnswers(root.id)} .text`).allTextContents()).toEqual([TEXT]);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('starts the answer again when a broken model stream is retried, instead of adding to what it wrote', async () => {
    const broken = 'Half an answer, cut off before its end.';
    const first = valve();
    const retried = valve();
    const model = await startModelServer((_request, n): Reply => ({ answer: { content: n === 1 ? broken : TEXT }, pacing: (n === 1 ? first : retried).pacing }));
    // Between the service and the model: cutting it breaks the answer's stream midway.
    const link = await startCuttableProxy(model.url);
    const root = await drivenRoot('retried', `${link.url}/v1`);
    const { page, errors } = await openForest(root);
    await sessionEmpty(page, root);
    await api.send(root.id, 'Write down the count.');

    first.letThrough(3);
    await shows(page, `${draftOf(root.id)} .text`, broken.slice(0, 2 * PIECE));
    link.cut();
    // The first request's stream is gone: what it still holds goes nowhere.
    first.letThrough(Infinity);
    retried.letThrough(2);
    await shows(page, `${draftOf(root.id)} .text`, TEXT.slice(0, PIECE));
    retried.letThrough(3);
    await shows(page, `${draftOf(root.id)} .text`, TEXT.slice(0, 2 * PIECE));
    expect(await page.locator(draftOf(root.id)).count()).toBe(1);
    expect(await page.locator(`${draftOf(root.id)} .draft-note`).isVisible()).toBe(false);

    retried.letThrough(Infinity);
    await shows(page, `${committedAnswers(root.id)} .text`, TEXT);
    expect(await page.locator(draftOf(root.id)).count()).toBe(0);
    expect(await page.locator(`${committedAnswers(root.id)} .text`).allTextContents()).toEqual([TEXT]);
    expect(model.requests).toHaveLength(2);
    expect(pageFaults(errors)).toEqual([]);
  });

  it('shows a page opened after the step only the committed answer: no delta is replayed', async () => {
    const model = await startModelServer((): Reply => ({ answer: { content: TEXT }, pacing: { pieceChars: PIECE } }));
    const root = await drivenRoot('finished', model.url);
    await api.send(root.id, 'Write down the count.');
    await waitForSession(api, root.id, 'the turn to end', turnEnded);

    const { page, errors } = await openForest(root);
    await shows(page, `${committedAnswers(root.id)} .text`, TEXT);
    await page.locator(`${panelOf(root.id)} li.entry.turn-end`).waitFor();
    // The stream replays the session from its start, the committed answer included: deltas,
    // had any been kept, would have come before it.
    const replayed = (text: string): boolean => (globalThis as unknown as PageGlobals).eventStreams.some((s) => s.url.includes('deltas=true') && s.text.includes(text));
    await page.waitForFunction(replayed, TEXT);
    const streams = (await eventStreams(page)).filter((s) => s.url.includes(`/v1/agents/${root.id}/events`));
    expect(streams.some((s) => /^event: entry$/m.test(s.text))).toBe(true);
    expect(streams.filter((s) => /^event: delta$/m.test(s.text))).toEqual([]);
    expect(await page.locator(draftOf(root.id)).count()).toBe(0);
    expect(await page.locator(`${committedAnswers(root.id)} .text`).allTextContents()).toEqual([TEXT]);
    expect(await page.locator(`${agentNode(root.id)} > .row .writing`).textContent()).toBe('');
    expect(pageFaults(errors)).toEqual([]);
  });
});
