/**
 * One package configuration for several instances on one PostgreSQL database: two instances
 * (two Systems with their own stores, instance ids and forest leases) on one fresh database.
 * A change on one is in force on the other before it answers; an instance that does not
 * confirm is named in the answer and the database refuses its report writes until it applied
 * the change; a fresh database takes the first instance's environment, a later instance the
 * database's configuration; concurrent changes serialise; a dropped LISTEN connection comes
 * back and a change still arrives.
 */
import type { LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import { beforeEach, describe, expect, it } from 'vitest';
import type { ReportDelivery } from '../../src/domain/packages.js';
import { PostgresSessionStore } from '../../src/adapters/postgres/postgres-store.js';
import { openClusterStore } from '../../src/composition/open-store.js';
import type { ClusterTopology } from '../../src/cluster/cluster-topology.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { callReport, report, startChild } from '../fixtures/forest.js';
import { createRoot, startHarness, until, type Harness } from '../fixtures/harness.js';
import { freshDatabase, type TestDatabase } from '../fixtures/postgres.js';

interface InstanceOptions {
  packages?: string[];
  reportDelivery?: ReportDelivery;
  confirmMs?: number;
  pollMs?: number;
}

interface Instance extends Harness {
  store: PostgresSessionStore;
}

let db: TestDatabase;

beforeEach(async () => {
  db = await freshDatabase();
  // Registered first, so it runs after every instance of the test closed.
  closeWithTest(() => db.dispose());
});

/** An instance on the test's database with id `id`, advertising http://<id lower-cased>. */
async function instance(id: string, options: InstanceOptions = {}): Promise<Instance> {
  const { store, cluster } = await openClusterStore(db.url, { instanceId: id, leaseMs: 60_000, confirmMs: options.confirmMs ?? 5_000, pollMs: options.pollMs });
  const h = await startHarness({
    store,
    cluster,
    url: `http://${id.toLowerCase()}`,
    ...(options.packages === undefined ? {} : { packages: options.packages }),
    ...(options.reportDelivery === undefined ? {} : { reportDelivery: options.reportDelivery }),
  });
  return { ...h, store };
}

/** A root on `h` (so `h` holds a forest lease) with a resident continuable child that can report. */
async function residentChild(h: Harness): Promise<{ root: { id: string; token: string }; child: { id: string; token: string } }> {
  const root = await createRoot(h.app, { id: 'r' });
  const child = await startChild(h, root);
  await report(h, child, 'before');
  return { root, child };
}

function change(h: Harness, method: 'PUT' | 'DELETE', name: string, config?: Record<string, string>): Promise<LightMyRequestResponse> {
  return h.app.inject({ method, url: `/v1/packages/${name}`, ...(method === 'PUT' ? { payload: config === undefined ? {} : { config } } : {}) });
}

async function listed(h: Harness): Promise<unknown> {
  const res = await h.app.inject({ method: 'GET', url: '/v1/packages' });
  expect(res.statusCode).toBe(200);
  return res.json();
}

function expectNoReportTool(res: LightMyRequestResponse): void {
  expect({ status: res.statusCode, body: res.json() as unknown }).toEqual({
    status: 404,
    body: { statusCode: 404, code: 'TOOL_NOT_FOUND', error: 'Not Found', message: 'unknown tool "report"', toolResult: { isError: true, content: 'Error: unknown tool "report"' } },
  });
}

/** The texts of the messages logged in a session, read from the database. */
async function loggedTexts(store: PostgresSessionStore, id: string): Promise<string[]> {
  const entries = await store.read(id, 0);
  return entries.flatMap((e) => (e.type === 'message' ? [e.content.map((b) => b.text).join('\n')] : []));
}

/** A bound on waits for work behind the database. */
const IO_WAIT = { timeoutMs: 5_000 };

const REPORT_REMOVED = { name: 'subagent-report', installed: false, config: { reportDelivery: 'quiet', settlementNotices: 'off' } };

describe('one package configuration for the cluster (PostgreSQL)', () => {
  it("a DELETE of subagent-report on one instance makes a resident child's report on the other TOOL_NOT_FOUND before the DELETE returns", async () => {
    const a = await instance('A');
    const b = await instance('B');
    const { child } = await residentChild(b);
    // B's reads of the configuration wait for a gate: until it opens, B cannot apply the change.
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const read = b.store.packages.read.bind(b.store.packages);
    b.store.packages.read = async () => {
      await gate;
      return read();
    };

    // A's checks of who has not confirmed: a second one naming B shows that A waits for B.
    let namedB = 0;
    const unconfirmed = a.store.packages.unconfirmed.bind(a.store.packages);
    a.store.packages.unconfirmed = async (self, version) => {
      const missing = await unconfirmed(self, version);
      if (missing.some((m) => m.instanceId === 'B')) namedB += 1;
      return missing;
    };

    let answered = false;
    const deleting = change(a, 'DELETE', 'subagent-report').finally(() => (answered = true));
    await until(() => namedB >= 2, 'A to check again that B has not applied the DELETE', IO_WAIT);
    expect({ answered, onB: b.system.packages.view('subagent-report').installed }).toEqual({ answered: false, onB: true });
    open();
    const deleted = await deleting;
    // Read in the span in which the answer arrives: B applied the change before A answered.
    const onB = b.system.packages.view('subagent-report');
    expect({ status: deleted.statusCode, body: deleted.json() as unknown }).toEqual({ status: 200, body: REPORT_REMOVED });
    expect(onB.installed).toBe(false);
    expectNoReportTool(await callReport(b, child, 'after'));
    expect(await loggedTexts(b.store, 'r')).not.toContainEqual(expect.stringContaining('after'));
  });

  it('a PUT of reportDelivery wakeup on one instance shows in GET /v1/packages on the other as soon as it returns', async () => {
    const a = await instance('A');
    const b = await instance('B');
    await residentChild(b);

    const put = await change(a, 'PUT', 'subagent-report', { reportDelivery: 'wakeup' });
    expect({ status: put.statusCode, body: put.json() as unknown }).toEqual({
      status: 200,
      body: { name: 'subagent-report', installed: true, config: { reportDelivery: 'wakeup', settlementNotices: 'off' } },
    });
    expect(await listed(b)).toEqual(await listed(a));
    expect(b.system.packages.view('subagent-report').config).toEqual({ reportDelivery: 'wakeup', settlementNotices: 'off' });
  });

  it("a fresh database takes the first instance's environment, and an instance starting later adopts the database's configuration, not its own", async () => {
    const a = await instance('A', { packages: ['subagent'], reportDelivery: 'wakeup' });
    expect(await a.store.packages.read()).toEqual({
      version: 1,
      reportFence: 0,
      state: { installed: ['subagent'], reportDelivery: 'wakeup', settlementNotices: 'off' },
    });

    // B's environment says: every package, quiet.
    const b = await instance('B');
    expect(await listed(b)).toEqual({
      packages: [
        { name: 'subagent', installed: true, config: {} },
        { name: 'subagent-control', installed: false, config: {} },
        { name: 'subagent-report', installed: false, config: { reportDelivery: 'wakeup', settlementNotices: 'off' } },
      ],
    });
    expect((await b.store.packages.read()).version).toBe(1);
  });

  it('an instance that does not confirm is named in the answer, its report write is refused by the database, and it reloads at once', async () => {
    const a = await instance('A', { confirmMs: 300 });
    const b = await instance('B');
    const { child } = await residentChild(b);
    // B stops following the configuration (its LISTEN and its version check): it cannot learn of the change.
    await (b.system.topology as ClusterTopology).packages.stop();

    const deleted = await change(a, 'DELETE', 'subagent-report');
    expect({ status: deleted.statusCode, body: deleted.json() as unknown }).toEqual({
      status: 200,
      body: { ...REPORT_REMOVED, unconfirmed: [{ instanceId: 'B', url: 'http://b' }] },
    });
    expect(b.system.packages.view('subagent-report').installed).toBe(true);

    // B still offers report, but the database refuses the write that would deliver it.
    const refused = await callReport(b, child, 'late');
    expect(refused.statusCode).toBe(421);
    expect(refused.json()).toMatchObject({ statusCode: 421, code: 'MISDIRECTED', message: expect.stringContaining('had not yet applied a package change that revoked report') });
    expect(await loggedTexts(a.store, 'r')).toEqual(expect.arrayContaining([expect.stringContaining('before')]));
    expect(await loggedTexts(a.store, 'r')).not.toContainEqual(expect.stringContaining('late'));

    // Refused, B reloaded the configuration at once and recorded that it applied it.
    await until(() => !b.system.packages.view('subagent-report').installed, 'B to apply the revocation', IO_WAIT);
    const { version } = await a.store.packages.read();
    await until(async () => (await a.store.packages.unconfirmed('A', version)).length === 0, 'B to confirm the revocation', IO_WAIT);
  });

  it('concurrent changes on two instances serialise: both land, one version apart, and both instances show both', async () => {
    const a = await instance('A');
    const b = await instance('B');
    await residentChild(b);
    await createRoot(a.app, { id: 'ra' });

    const [onA, onB] = await Promise.all([
      change(a, 'PUT', 'subagent-report', { reportDelivery: 'next-step' }),
      change(b, 'PUT', 'subagent-report', { settlementNotices: 'all' }),
    ]);
    expect([onA.statusCode, onB.statusCode]).toEqual([200, 200]);
    const stored = await a.store.packages.read();
    expect(stored).toMatchObject({ version: 3, state: { reportDelivery: 'next-step', settlementNotices: 'all' } });
    const both = { reportDelivery: 'next-step', settlementNotices: 'all' };
    expect([a.system.packages.view('subagent-report').config, b.system.packages.view('subagent-report').config]).toEqual([both, both]);
  });

  it('an instance whose LISTEN connection drops reconnects, and a change made meanwhile still reaches it before the answer', async () => {
    const a = await instance('A');
    const b = await instance('B', { pollMs: 60_000 });
    const { child } = await residentChild(b);

    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      const { rowCount } = await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'`);
      expect(rowCount).toBeGreaterThan(0);
    } finally {
      await admin.end();
    }

    const deleted = await change(a, 'DELETE', 'subagent-report');
    expect({ status: deleted.statusCode, body: deleted.json() as unknown }).toEqual({ status: 200, body: REPORT_REMOVED });
    expectNoReportTool(await callReport(b, child, 'after'));
  });
});
