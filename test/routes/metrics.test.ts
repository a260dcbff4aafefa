/**
 * GET /metrics (`app.inject()`): after a scripted forest (quiet and wakeup reports, a report to
 * a parent that is gone, a settlement and a cold resume) the Prometheus exposition shows the
 * exact counter values, the live-state gauges and the drain state; with operator keys the
 * scrape needs a key while the docs and health routes do not.
 */
import { describe, expect, it } from 'vitest';
import { claim, createRoot, postOutput, send, session, startHarness, until, type CreatedRoot, type Harness } from '../fixtures/harness.js';
import { startChild, callReport } from '../fixtures/forest.js';

function open(apiKeys: string[] = []): Promise<Harness> {
  return startHarness({ apiKeys });
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the Prometheus text exposition format (samples only; HELP and TYPE lines skipped). */
function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null) throw new Error(`not an exposition sample: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1] ?? ''] = pair[2] ?? '';
    const raw = match[3] ?? '';
    samples.push({ name: match[1] ?? '', labels, value: raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw) });
  }
  return samples;
}

class Scrape {
  constructor(readonly samples: Sample[]) {}

  /** The value of the sample with exactly these labels; undefined when there is none. */
  value(name: string, labels: Record<string, string> = {}): number | undefined {
    const want = JSON.stringify(Object.entries(labels).sort());
    return this.samples.find((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want)?.value;
  }

  /** Every sample of a metric, keyed by its labels (`k=v,...`). */
  all(name: string): Record<string, number> {
    const out: Record<string, number> = {};
    for (const s of this.samples.filter((x) => x.name === name)) {
      out[Object.entries(s.labels).sort().map(([k, v]) => `${k}=${v}`).join(',')] = s.value;
    }
    return out;
  }
}

async function scrape(h: Harness, headers: Record<string, string> = {}): Promise<Scrape> {
  const res = await h.app.inject({ method: 'GET', url: '/metrics', headers });
  if (res.statusCode !== 200) throw new Error(`scrape failed: ${res.statusCode} ${res.body}`);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return new Scrape(parseExposition(res.body));
}

async function report(h: Harness, child: CreatedRoot, output: string): Promise<void> {
  const res = await callReport(h, child, output);
  if (res.statusCode !== 200) throw new Error(`report failed: ${res.statusCode} ${res.body}`);
}

async function finishTurn(h: Harness, agent: CreatedRoot): Promise<void> {
  const step = await claim(h.app, agent, 5_000);
  if (step === null) throw new Error(`no step for ${agent.id}`);
  const res = await postOutput(h.app, agent, step.id, { content: 'done' });
  expect(res.json()).toMatchObject({ turn: 'ended' });
}

async function statusOf(h: Harness, id: string): Promise<string> {
  const res = await h.app.inject({ method: 'GET', url: `/v1/agents/${id}` });
  return (res.json() as { status: string }).status;
}

describe('GET /metrics after a scripted forest', () => {
  it('counts reports by delivery and outcome, settlements, cold resumes, requests by route and committed entries exactly', async () => {
    const h = await open();
    const root = await createRoot(h.app, { id: 'r' });
    const a = await startChild(h, root, { prompt: 'task a' });
    const b = await startChild(h, root, { prompt: 'task b' });
    await report(h, a, 'quiet one');
    await report(h, b, 'quiet two');

    const put = await h.app.inject({ method: 'PUT', url: '/v1/packages/subagent-report', payload: { config: { reportDelivery: 'wakeup' } } });
    expect(put.statusCode).toBe(200);
    const c = await startChild(h, root, { prompt: 'task c' });
    const beforeWakeup = await scrape(h);
    expect(beforeWakeup.value('agentforest_report_to_parent_turn_seconds_count')).toBe(0);
    expect(beforeWakeup.value('agentforest_reports_total', { delivery: 'quiet', outcome: 'accepted' })).toBe(2);
    expect(beforeWakeup.value('agentforest_reports_total', { delivery: 'wakeup', outcome: 'accepted' })).toBeUndefined();

    // The wakeup report starts a turn of the idle root at once.
    await report(h, c, 'wake up');
    expect(await statusOf(h, root.id)).toBe('running');
    const afterWakeup = await scrape(h);
    expect(afterWakeup.value('agentforest_reports_total', { delivery: 'wakeup', outcome: 'accepted' })).toBe(1);
    expect(afterWakeup.value('agentforest_report_to_parent_turn_seconds_count')).toBe(1);

    // A quiet report to the running root is staged; a followup to it is queued.
    await report(h, a, 'quiet three');
    expect((await send(h.app, root.id, 'after this turn')).statusCode).toBe(202);

    // a settles, and the root's followup cold-resumes it.
    await finishTurn(h, a);
    await until(async () => (await statusOf(h, a.id)) === 'settled', 'a settled');
    const resume = await h.app.inject({
      method: 'POST',
      url: `/v1/agents/${a.id}/messages`,
      headers: { 'x-agent-token': root.token },
      payload: { content: 'more for a', delivery: 'followup' },
    });
    expect(resume.statusCode).toBe(202);
    expect(resume.json()).toHaveProperty('resumed.agentToken');

    const logs = await Promise.all(['r', a.id, b.id, c.id].map((id) => session(h.app, id)));
    const live = await scrape(h);
    expect(live.all('agentforest_reports_total')).toEqual({
      'delivery=quiet,outcome=accepted': 3,
      'delivery=wakeup,outcome=accepted': 1,
    });
    expect(live.value('agentforest_settlements_total')).toBe(1);
    expect(live.value('agentforest_cold_resumes_total')).toBe(1);
    expect(live.value('agentforest_report_to_parent_turn_seconds_count')).toBe(1);
    expect(live.all('agentforest_live_agents')).toEqual({ 'kind=root,status=running': 1, 'kind=child,status=running': 3 });
    expect(live.value('agentforest_inbox_depth')).toBe(1);
    // Staged: the quiet report in the running root, and in b and c (their turns are open) the
    // report call and its result made through the tool-call route, two messages each.
    expect(live.value('agentforest_staged_messages')).toBe(5);
    expect(live.value('agentforest_event_streams')).toBe(0);
    expect(live.value('agentforest_draining')).toBe(0);
    expect(live.value('agentforest_store_entries_total')).toBe(logs.reduce((n, log) => n + log.length, 0));
    const commits = live.value('agentforest_store_commit_seconds_count') ?? 0;
    expect(commits).toBeGreaterThan(0);
    expect(live.value('agentforest_store_commit_seconds_bucket', { le: '+Inf' })).toBe(commits);

    const requests = (method: string, route: string, status: number): number | undefined =>
      live.value('agentforest_http_requests_total', { method, route, status: String(status) });
    expect(requests('POST', '/v1/agents', 201)).toBe(1);
    expect(requests('POST', '/v1/agents/:id/children', 201)).toBe(3);
    expect(requests('POST', '/v1/agents/:id/tool-calls', 200)).toBe(4);
    expect(requests('PUT', '/v1/packages/:name', 200)).toBe(1);
    expect(requests('POST', '/v1/agents/:id/messages', 202)).toBe(2);
    expect(requests('POST', '/v1/agents/:id/steps/next', 200)).toBe(1);
    expect(requests('POST', '/v1/agents/:id/steps/:stepId/output', 200)).toBe(1);
    expect(requests('GET', '/metrics', 200)).toBe(2);
    expect(
      live.value('agentforest_http_request_duration_seconds_count', { method: 'POST', route: '/v1/agents/:id/children', status: '201' }),
    ).toBe(3);

    // The root goes away without its children; a report to it then fails.
    expect((await h.app.inject({ method: 'DELETE', url: `/v1/agents/${root.id}?cascade=false` })).statusCode).toBe(202);
    const refused = await callReport(h, b, 'anyone there?');
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toMatchObject({ code: 'PARENT_UNAVAILABLE' });
    const missing = await h.app.inject({ method: 'GET', url: '/v1/agents/nobody' });
    expect(missing.statusCode).toBe(404);

    const after = await scrape(h);
    expect(after.all('agentforest_reports_total')).toEqual({
      'delivery=quiet,outcome=accepted': 3,
      'delivery=wakeup,outcome=accepted': 1,
      'delivery=quiet,outcome=PARENT_UNAVAILABLE': 1,
    });
    expect(after.value('agentforest_http_requests_total', { method: 'POST', route: '/v1/agents/:id/tool-calls', status: '409' })).toBe(1);
    expect(after.value('agentforest_http_requests_total', { method: 'DELETE', route: '/v1/agents/:id', status: '202' })).toBe(1);
    expect(after.value('agentforest_http_requests_total', { method: 'GET', route: '/v1/agents/:id', status: '404' })).toBe(1);
    expect(after.all('agentforest_live_agents')).toEqual({ 'kind=child,status=running': 3 });
    expect(after.value('agentforest_settlements_total')).toBe(1);
    expect(after.value('agentforest_cold_resumes_total')).toBe(1);

    h.system.gate.startDrain();
    expect((await scrape(h)).value('agentforest_draining')).toBe(1);
  });

  it('a request to an unknown route is counted under route "unmatched"', async () => {
    const h = await open();
    expect((await h.app.inject({ method: 'GET', url: '/nowhere' })).statusCode).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: '/nowhere/else' })).statusCode).toBe(404);
    expect((await scrape(h)).value('agentforest_http_requests_total', { method: 'GET', route: 'unmatched', status: '404' })).toBe(2);
  });
});

describe('GET /metrics with operator keys', () => {
  it('needs the operator key (401 UNAUTHENTICATED without it) while /docs and /healthz stay open', async () => {
    const h = await open(['metrics-key']);
    const without = await h.app.inject({ method: 'GET', url: '/metrics' });
    expect(without.statusCode).toBe(401);
    expect(without.json()).toMatchObject({ statusCode: 401, code: 'UNAUTHENTICATED' });
    const wrong = await h.app.inject({ method: 'GET', url: '/metrics', headers: { authorization: 'Bearer not-the-key' } });
    expect(wrong.statusCode).toBe(401);

    const withKey = await scrape(h, { authorization: 'Bearer metrics-key' });
    expect(withKey.value('agentforest_draining')).toBe(0);
    expect(withKey.value('agentforest_http_requests_total', { method: 'GET', route: '/metrics', status: '401' })).toBe(2);

    const docs = await h.app.inject({ method: 'GET', url: '/docs' });
    expect(docs.statusCode).toBeLessThan(400);
    const document = await h.app.inject({ method: 'GET', url: '/docs/json' });
    expect(document.statusCode).toBe(200);
    expect(document.json()).toHaveProperty('paths./metrics');
    const health = await h.app.inject({ method: 'GET', url: '/healthz' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toEqual({ status: 'ok' });
  });
});
