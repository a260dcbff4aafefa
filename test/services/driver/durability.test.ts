/**
 * The built-in model driver against a scripted chat-completions server (demo/scripted-model.ts).
 * Durability around the driver: a commit failing after the answer is in, and a restart on SQLite
 * with a driven root mid-turn.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { lastMessage, type Reply } from '../../../demo/scripted-model.js';
import { SqliteSessionStore } from '../../../src/adapters/sqlite/sqlite-store.js';
import { tempDir } from '../../fixtures/cleanup.js';
import {
  accepted,
  answer,
  DRIVER_WAIT,
  followup,
  hasAssistantMessage,
  header,
  picture,
  spec,
  start,
  startLogged,
  turnEnded,
  turnEnds,
  type AgentView,
} from '../../fixtures/driver.js';
import { createRoot, until } from '../../fixtures/harness.js';
import { FaultyStore, deferred } from '../../fixtures/races.js';
import { startModelServer } from '../../fixtures/model-server.js';

describe('the built-in model driver', { timeout: 20_000 }, () => {
  it('a commit that fails after the answer is in does not fail the turn queued behind it; the batch is retried', async () => {
    const store = new FaultyStore();
    const h = await startLogged({ store });
    const first = deferred<Reply>();
    const model = await startModelServer((req, n) => (n === 1 ? first.promise : answer(`answer to ${lastMessage(req)!.content ?? ''}`)));
    const root = await createRoot(h.app, { model: spec(model) });
    accepted(await followup(h, root.id, 'first'));
    await until(() => model.requests.length === 1, 'the first request', DRIVER_WAIT);
    accepted(await followup(h, root.id, 'second'));
    // The batch that carries the first answer (its turn's end, the next turn's start) fails once.
    store.failOnce = hasAssistantMessage;
    first.resolve(answer('answer to first'));
    const log = await turnEnded(h, root.id, 2);
    expect(store.failed).toHaveLength(1);
    expect(picture(log)).toEqual([
      'turn-start',
      'user:first',
      'step-start:0',
      'assistant:answer to first',
      'turn-end:completed',
      'turn-start',
      'user:second',
      'step-start:0',
      'assistant:answer to second',
      'turn-end:completed',
    ]);
    expect(turnEnds(log).map((e) => e.error)).toEqual([undefined, undefined]);
    // Everything in the failed batch was written by the retry, once.
    const failedSeqs = store.failed[0]!.entries.map((e) => e.entry.seq);
    expect(failedSeqs).toContain(4);
    expect(log.map((e) => e.seq)).toEqual(log.map((_, i) => i + 1));
    // The second turn made its own request, with its own prompt.
    expect(model.requests).toHaveLength(2);
    expect(model.requests[1]!.body.messages).toEqual([
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'answer to first' },
      { role: 'user', content: 'second' },
    ]);
    expect(h.errors()).toEqual(['session batch commit failed; kept and retried', 'recording a model answer failed']);
  });

  it('restarts on SQLite: a driven root with an open turn resumes with its model and is driven again', async () => {
    const dir = tempDir('agentforest-driver-');
    const path = join(dir, 'agentforest.db');
    const model = await startModelServer(() => ({ hang: true }));
    const first = await start({ store: new SqliteSessionStore({ path }) });
    const root = await createRoot(first.app, { id: 'driven-root', instructions: 'Persist.', model: spec(model, { maxSteps: 5 }) });
    accepted(await followup(first, root.id, 'open turn'));
    await until(() => model.requests.length === 1, 'the first request', DRIVER_WAIT);
    accepted(await followup(first, root.id, 'queued behind it'));
    await first.close();
    await model.nextAbandoned();

    model.script = (req) => answer(`answer to ${lastMessage(req)!.content ?? ''}`);
    const second = await start({ store: new SqliteSessionStore({ path }) });
    const resumed = await second.app.inject({ method: 'POST', url: `/v1/agents/${root.id}/resume` });
    expect(resumed.statusCode).toBe(201);
    expect((resumed.json() as { agent: AgentView }).agent.model).toEqual(spec(model, { maxSteps: 5 }));
    expect((await header(second, root.id)).model).toEqual(spec(model, { maxSteps: 5 }));
    // The item queued before the stop is driven first, then a new followup.
    await turnEnded(second, root.id, 2);
    accepted(await followup(second, root.id, 'after restart'));
    const log = await turnEnded(second, root.id, 3);
    expect(picture(log)).toEqual([
      'turn-start',
      'user:open turn',
      'step-start:0',
      'turn-end:cancelled',
      'turn-start',
      'user:queued behind it',
      'step-start:0',
      'assistant:answer to queued behind it',
      'turn-end:completed',
      'turn-start',
      'user:after restart',
      'step-start:0',
      'assistant:answer to after restart',
      'turn-end:completed',
    ]);
    expect(model.requests.slice(1).map((r) => r.body.messages)).toEqual([
      [
        { role: 'system', content: 'Persist.' },
        { role: 'user', content: 'open turn' },
        { role: 'user', content: 'queued behind it' },
      ],
      [
        { role: 'system', content: 'Persist.' },
        { role: 'user', content: 'open turn' },
        { role: 'user', content: 'queued behind it' },
        { role: 'assistant', content: 'answer to queued behind it' },
        { role: 'user', content: 'after restart' },
      ],
    ]);
  });
});
