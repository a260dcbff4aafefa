/**
 * Two instances on one PostgreSQL database behind a plain round-robin proxy, end to end: the
 * contract scenarios (test/fixtures/contract-scenarios.ts) run through the proxy, which sends
 * each request to the next instance in turn with no affinity, so about half of every
 * scenario's requests land on the instance that does not own the forest. What must hold: every
 * scenario passes, the proxy never returns 421, and both instances serve each scenario.
 *
 * What the whole service shares (the package config, the worker pool, the list of live agents)
 * is exercised by test/fixtures/cluster-wide-scenarios.ts.
 *
 * Operator keys are required, as in production: the key a client sends is checked where the
 * request lands and passed on to the instance that answers.
 *
 * The same scenarios also run against one instance directly, so a failure tells a cluster bug
 * (it fails only through the proxy) from a scenario bug (it fails on one instance too).
 * Instances are shared by a describe's scenarios; each scenario makes and disposes its own
 * roots.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { children, eventsWithResume, reportQuiet, roots } from '../fixtures/contract-scenarios.js';
import { listing, reportWakeup, revocation, toolWorkerPool, wakeupRace, workerPoolAnyRoot, workerPoolByRoot, workerPoolWaiting } from '../fixtures/cluster-wide-scenarios.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';
import { startRoundRobinProxy, type RoundRobinProxy } from '../fixtures/round-robin-proxy.js';
import { ServerClient, startServer, stopLeftoverServers, type RunningServer } from '../fixtures/server-process.js';
import { closeStreams } from '../fixtures/sse.js';


const SCENARIOS: [string, (api: ServerClient) => Promise<void>][] = [
  ['a root is created, messaged, stepped, read and disposed', roots],
  ['one-shot and continuable children run, close or settle, and a settled child cold-resumes on its parent’s followup', children],
  ['a quiet report is appended to an idle parent and staged for a running one, exactly once each', reportQuiet],
  ['agent and forest event streams resumed with Last-Event-ID lose and repeat nothing', eventsWithResume],
  ['after a PUT to wakeup delivery, a report to an idle parent starts one parent turn', reportWakeup],
  ['a DELETE of subagent-report revokes report from resident children at once, and a PUT installs it again', revocation],
  ['racing reports to an idle parent in wakeup mode start exactly one turn and queue the rest', wakeupRace],
  ['the worker pool kept to one forest hands out each step once', workerPoolByRoot],
  ['the worker pool of every forest hands out the oldest step first, each once', workerPoolAnyRoot],
  ['a waiting pool claim gets a step that becomes claimable on any instance', workerPoolWaiting],
  ['the tool worker pool of every forest hands out the oldest call first, each once, and a waiting claim gets a call made later', toolWorkerPool],
  ['the list of live agents holds every agent once, in order, with its live status', listing],
];

/** Every instance requires this operator key; instances pass the caller's own on to each other. */
const KEY = 'cluster-operator-key';

async function startInstance(db: TestDatabase, instanceId: string): Promise<RunningServer> {
  return startServer({
    // Ignored with a database URL; `:memory:` keeps a misconfiguration from writing a file.
    dataPath: ':memory:',
    env: { AGENTFOREST_DATABASE_URL: db.url, AGENTFOREST_INSTANCE_ID: instanceId, AGENTFOREST_API_KEYS: KEY, LOG_LEVEL: 'info' },
  });
}

/** The logs of every instance, for a failing request's message. */
function logsOf(instances: readonly RunningServer[]): () => string {
  return () => instances.map((s, i) => `--- instance ${i} (${s.url}) ---\n${s.text()}`).join('\n');
}

describe('the contract through a round-robin proxy in front of two instances', { timeout: 30_000 }, () => {
  let db: TestDatabase | undefined;
  let proxy: RoundRobinProxy | undefined;
  let api: ServerClient;

  beforeAll(async () => {
    db = await freshDatabase();
    const instances = await Promise.all([startInstance(db, 'cluster-a'), startInstance(db, 'cluster-b')]);
    proxy = await startRoundRobinProxy(instances.map((s) => s.url));
    api = new ServerClient({ url: proxy.url, text: logsOf(instances) }, KEY);
  });

  afterEach(() => closeStreams());

  afterAll(async () => {
    closeStreams();
    await proxy?.close();
    await stopLeftoverServers();
    await db?.dispose();
  });

  it('refuses a request without the operator key where it lands, before forwarding or asking the other instances', async () => {
    const roots = [await api.createRoot({}), await api.createRoot({})];
    try {
      for (const root of roots) {
        // Two requests each: one lands on the owner, one on the instance that would forward it.
        for (let i = 0; i < 2; i++) expect((await api.request('GET', `/v1/agents/${root.id}`, { key: null })).status).toBe(401);
      }
      for (let i = 0; i < 2; i++) {
        expect((await api.request('GET', '/v1/agents', { key: 'not-the-key' })).status).toBe(401);
        expect((await api.request('POST', '/v1/steps/next', { key: null, body: { waitMs: 0 } })).status).toBe(401);
      }
    } finally {
      for (const root of roots) await api.expect(202, 'DELETE', `/v1/agents/${root.id}`);
    }
  });

  for (const [behaviour, scenario] of SCENARIOS) {
    it(`${behaviour}, through the proxy, with no 421 and both instances serving`, async () => {
      const from = proxy!.answers.length;
      const sentBefore = proxy!.byBackend();
      await scenario(api);
      const answers = proxy!.answers.slice(from);
      expect(answers.filter((a) => a.status === 421)).toEqual([]);
      expect(answers.filter((a) => a.status >= 500)).toEqual([]);
      const served = proxy!.byBackend().map((n, i) => n - sentBefore[i]!);
      expect(served.every((n) => n > 0), `requests per instance: ${served.join(', ')}`).toBe(true);
    });
  }
});

describe('the contract on one instance, directly', { timeout: 30_000 }, () => {
  let db: TestDatabase | undefined;
  let api: ServerClient;

  beforeAll(async () => {
    db = await freshDatabase();
    api = new ServerClient(await startInstance(db, 'single'), KEY);
  });

  afterEach(() => closeStreams());

  afterAll(async () => {
    closeStreams();
    await stopLeftoverServers();
    await db?.dispose();
  });

  for (const [behaviour, scenario] of SCENARIOS) {
    it(`${behaviour}, on one instance`, async () => {
      await scenario(api);
    });
  }
});
