/**
 * Soak: does the server's memory stay flat while forests come and go? The built service
 * (dist/server.js, as `npm start` runs it) on a SQLite file, driven over HTTP epoch after
 * epoch, one epoch at a time and at most one every `--epoch-seconds` (a fixed pace, so a slope
 * per minute means the same on a faster machine, and a modest load beside other work). In each
 * epoch `--forests` forests run side by side, each watched by a forest event stream:
 *
 *   1. a root with a budget is created, and its turn spawns `--children` continuable children
 *      (spawn_subagent); every answer of every agent posts its usage;
 *   2. each child reports (the `report` tool) and ends its turn, and settles;
 *   3. a root's turn sends each settled child a message (send_message): each is cold-resumed,
 *      reports, ends its turn and settles again;
 *   4. the root sends each one a followup over HTTP (with an Idempotency-Key): cold-resumed
 *      once more, it reports and settles;
 *   5. the root is disposed (DELETE, cascade): at the end of the epoch no agent is live.
 *
 * After an epoch, at most every `--sample-seconds`, the bench reads the server's metrics
 * (live agents must be 0; the event-loop delay since the last sample, without the bench's own
 * collections), then its heap after full collections through its inspector
 * (bench/inspector.ts) and its resident memory. After `--warm-up` minutes it fits
 * a line through the heap samples (least squares) and states the slope in MiB a minute, the
 * drift over the measured window, and the spread of the samples around the line: the target is
 * a drift within that spread. With `--snapshots DIR` it takes a heap snapshot at the end of
 * the warm-up and at the end, and prints what grew between them (bench/heap-summary.ts);
 * snapshots cost the server memory of their own, so its RSS is not read in such a run.
 * `--env NAME=VALUE` (repeatable) sets the server's environment, e.g.
 * `--env AGENTFOREST_STEP_CACHE_MB=0`. Prints one line per sample and a summary; writes
 * bench/soak.json.
 *
 *   npm run bench:soak -- [--minutes 30] [--warm-up 5] [--epoch-seconds 2] [--forests 4] [--children 3] [--sample-seconds 10] [--snapshots DIR] [--env NAME=VALUE]
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { heapGrowth, summarizeHeap } from './heap-summary.js';
import { Inspector } from './inspector.js';
import { arg, buildServer, call, root, startInspectedServer, type InspectedServer } from './lib.js';

const minutes = arg('minutes', 30);
const warmUpMinutes = arg('warm-up', Math.min(5, minutes / 3));
const forests = arg('forests', 4);
const children = arg('children', 3);
const sampleSeconds = arg('sample-seconds', 10);
const epochSeconds = arg('epoch-seconds', 2);
const snapshotsAt = process.argv.indexOf('--snapshots') === -1 ? undefined : process.argv[process.argv.indexOf('--snapshots') + 1];
const serverEnv = Object.fromEntries(
  process.argv.flatMap((a, i) => (a === '--env' ? [process.argv[i + 1] ?? ''] : [])).map((pair) => {
    const at = pair.indexOf('=');
    if (at < 1) throw new Error(`--env takes NAME=VALUE, not "${pair}"`);
    return [pair.slice(0, at), pair.slice(at + 1)];
  }),
);
if (!(minutes > 0) || !(warmUpMinutes >= 0) || warmUpMinutes >= minutes) throw new Error('--warm-up must be shorter than --minutes');
const MiB = 2 ** 20;

interface Agent {
  id: string;
  token: string;
}

interface ToolCall {
  id: string;
  name: string;
  input: unknown;
}

interface OutputResult {
  turn: 'open' | 'ended';
  spawned?: { agentId: string; agentToken: string }[];
  resumed?: { agentId: string; agentToken: string }[];
}

interface Sample {
  minute: number;
  epochs: number;
  heapMiB: number;
  rssMiB: number;
  eventLoopP99Ms: number;
  eventLoopMaxMs: number;
}

let requests = 0;
const api = <T>(url: string, method: string, body?: unknown, headers?: Record<string, string>): Promise<T> => {
  requests++;
  return call<T>(url, method, body, headers);
};

/** Claim the agent's next step and post `output`; the step's turn state comes back. */
async function step(url: string, agent: Agent, output: { content?: string; toolCalls?: ToolCall[] }): Promise<OutputResult> {
  const token = { 'x-agent-token': agent.token };
  const { step: claimed } = await api<{ step: { id: string } }>(`${url}/v1/agents/${agent.id}/steps/next`, 'POST', { waitMs: 10_000 }, token);
  return api<OutputResult>(`${url}/v1/agents/${agent.id}/steps/${claimed.id}/output`, 'POST', { ...output, usage: USAGE, model: 'soak-model' }, token);
}

/** What each answer says it used: charged to the forest's budget and counted in the metrics. */
const USAGE = { promptTokens: 120, completionTokens: 30, totalTokens: 150 };

/** A child's turn: it reports, then answers without tool calls, which ends the turn. */
async function childTurn(url: string, child: Agent, n: number): Promise<void> {
  await step(url, child, { toolCalls: [{ id: `report-${n}`, name: 'report', input: { output: `finding ${n} of ${child.id}: ${'detail '.repeat(20)}` } }] });
  const end = await step(url, child, { content: `turn ${n} done` });
  if (end.turn !== 'ended') throw new Error(`the turn of ${child.id} did not end`);
}

/** Resolves once every child has settled (polled: its status in GET /v1/agents/{id}). */
async function settled(url: string, kids: readonly Agent[]): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (const kid of kids) {
    for (;;) {
      const { status } = await api<{ status: string }>(`${url}/v1/agents/${kid.id}`, 'GET');
      if (status === 'settled') break;
      if (Date.now() > deadline) throw new Error(`child ${kid.id} did not settle in 30 s (status ${status})`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

/** Read a forest's event stream until it is aborted; resolves with how many events came. */
async function watch(url: string, rootId: string, signal: AbortSignal): Promise<number> {
  let events = 0;
  try {
    const res = await fetch(`${url}/v1/agents/${rootId}/events?forest=true`, { signal });
    if (!res.ok || res.body === null) throw new Error(`event stream of ${rootId}: ${res.status}`);
    const decoder = new TextDecoder();
    for await (const chunk of res.body) events += decoder.decode(chunk as Uint8Array, { stream: true }).split('\n\n').length - 1;
  } catch (error) {
    if (!signal.aborted) throw error;
  }
  return events;
}

/** One forest from its creation to its disposal (see the header). */
async function forest(url: string, epoch: number, index: number): Promise<void> {
  const created = await api<{ agent: { id: string }; agentToken: string }>(`${url}/v1/agents`, 'POST', { instructions: 'You run a small research forest.', metadata: { soak: epoch }, budget: { steps: 1000, tokens: 1_000_000 } });
  const rootAgent: Agent = { id: created.agent.id, token: created.agentToken };
  const stop = new AbortController();
  const watching = watch(url, rootAgent.id, stop.signal);
  try {
    // 1. The root spawns its children.
    await api(`${url}/v1/agents/${rootAgent.id}/messages`, 'POST', { content: `epoch ${epoch}, forest ${index}: split the work`, delivery: 'followup' });
    const spawn = await step(url, rootAgent, {
      toolCalls: Array.from({ length: children }, (_, i) => ({ id: `spawn-${i}`, name: 'spawn_subagent', input: { prompt: `part ${i} of the work`, label: `part-${i}` } })),
    });
    const kids = (spawn.spawned ?? []).map((s) => ({ id: s.agentId, token: s.agentToken }));
    if (kids.length !== children) throw new Error(`${rootAgent.id} spawned ${kids.length} children, not ${children}`);
    await step(url, rootAgent, { content: 'waiting for the parts' });
    // 2. Each child reports and settles.
    await Promise.all(kids.map((kid) => childTurn(url, kid, 1)));
    await settled(url, kids);
    // 3. Cold resume through send_message.
    await api(`${url}/v1/agents/${rootAgent.id}/messages`, 'POST', { content: 'ask each part for more', delivery: 'followup' });
    const sent = await step(url, rootAgent, {
      toolCalls: kids.map((kid, i) => ({ id: `send-${i}`, name: 'send_message', input: { subagent_id: kid.id, message: 'go deeper' } })),
    });
    const resumed = new Map((sent.resumed ?? []).map((r) => [r.agentId, r.agentToken]));
    for (const kid of kids) {
      const token = resumed.get(kid.id);
      if (token === undefined) throw new Error(`send_message did not cold-resume ${kid.id}`);
      kid.token = token;
    }
    await step(url, rootAgent, { content: 'waiting again' });
    await Promise.all(kids.map((kid) => childTurn(url, kid, 2)));
    await settled(url, kids);
    // 4. Cold resume through a followup over HTTP from the root.
    await Promise.all(kids.map(async (kid) => {
      const r = await api<{ resumed?: { agentToken: string } }>(
        `${url}/v1/agents/${kid.id}/messages`,
        'POST',
        { content: 'one last thing', delivery: 'followup' },
        { 'x-agent-token': rootAgent.token, 'idempotency-key': `soak-${kid.id}-3` },
      );
      if (r.resumed === undefined) throw new Error(`the followup did not cold-resume ${kid.id}`);
      kid.token = r.resumed.agentToken;
      await childTurn(url, kid, 3);
    }));
    await settled(url, kids);
    // 5. Disposed, with its settled children closed by the cascade.
    await api(`${url}/v1/agents/${rootAgent.id}`, 'DELETE');
  } finally {
    stop.abort();
    await watching;
  }
}

/** A figure of the Prometheus text (summed over its series), or undefined when absent. */
function metric(text: string, name: string): number | undefined {
  const values = text.split('\n').filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`)).map((l) => Number(l.slice(l.lastIndexOf(' ') + 1)));
  return values.length === 0 ? undefined : values.reduce((a, b) => a + b, 0);
}

function residentBytes(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
  if (line === undefined) throw new Error('no VmRSS in /proc');
  return Number(line.split(/\s+/)[1]) * 1024;
}

/** Least squares through (x, y): slope, its standard error, and the spread (max − min) of the residuals. */
function fitLine(points: readonly { x: number; y: number }[]): { slope: number; slopeError: number; spread: number } {
  const n = points.length;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  const sxx = points.reduce((s, p) => s + (p.x - mx) ** 2, 0);
  const slope = points.reduce((s, p) => s + (p.x - mx) * (p.y - my), 0) / sxx;
  const residuals = points.map((p) => p.y - (my + slope * (p.x - mx)));
  const slopeError = Math.sqrt(residuals.reduce((s, r) => s + r * r, 0) / Math.max(1, n - 2) / sxx);
  return { slope, slopeError, spread: Math.max(...residuals) - Math.min(...residuals) };
}

const round = (n: number, digits = 2): number => +n.toFixed(digits);

/** Forests disposed between the first and the last of these samples. */
const forestsIn = (samples: readonly Sample[]): number => (samples.at(-1)!.epochs - samples[0]!.epochs) * forests;

async function sample(server: InspectedServer, inspector: Inspector, minute: number, epochs: number): Promise<Sample> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const live = metric(text, 'agentforest_live_agents') ?? 0;
  if (live !== 0) throw new Error(`${live} agents are live at the end of epoch ${epochs}`);
  const p99 = metric(text, 'nodejs_eventloop_lag_p99_seconds');
  const max = metric(text, 'nodejs_eventloop_lag_max_seconds');
  if (p99 === undefined || max === undefined) throw new Error('/metrics carries no nodejs_eventloop_lag_* series');
  const heap = await inspector.settledHeap();
  // A scrape resets the event-loop delay histogram: the next one then leaves out these collections.
  await (await fetch(`${server.url}/metrics`)).text();
  return { minute: round(minute, 3), epochs, heapMiB: round(heap.used / MiB, 3), rssMiB: round(residentBytes(server.pid) / MiB, 1), eventLoopP99Ms: round(p99 * 1000), eventLoopMaxMs: round(max * 1000) };
}

async function main(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'agentforest-soak-'));
  const server = await startInspectedServer(join(dir, 'soak.db'), serverEnv);
  const inspector = await Inspector.connect(server.inspectorUrl);
  let growth: ReturnType<typeof heapGrowth> | undefined;
  try {
    const samples: Sample[] = [];
    const t0 = performance.now();
    const minute = (): number => (performance.now() - t0) / 60_000;
    let epochs = 0;
    let lastSample = -Infinity;
    let warmSnapshot: string | undefined;
    for (;;) {
      const started = performance.now();
      await Promise.all(Array.from({ length: forests }, (_, i) => forest(server.url, epochs, i)));
      epochs++;
      const idle = epochSeconds * 1000 - (performance.now() - started);
      if (idle > 0) await new Promise((r) => setTimeout(r, idle));
      const done = minute() >= minutes;
      if (!done && performance.now() - lastSample < sampleSeconds * 1000) continue;
      lastSample = performance.now();
      const s = await sample(server, inspector, minute(), epochs);
      samples.push(s);
      console.log(`${s.minute.toFixed(2).padStart(6)} min  epoch ${String(epochs).padStart(5)}  heap ${s.heapMiB.toFixed(2)} MiB  RSS ${s.rssMiB.toFixed(1)} MiB  event-loop p99 ${s.eventLoopP99Ms} ms`);
      if (snapshotsAt !== undefined && warmSnapshot === undefined && s.minute >= warmUpMinutes) {
        mkdirSync(snapshotsAt, { recursive: true });
        warmSnapshot = join(snapshotsAt, 'after-warm-up.heapsnapshot');
        await inspector.heapSnapshot(warmSnapshot);
      }
      if (done) break;
    }
    if (snapshotsAt !== undefined && warmSnapshot !== undefined) {
      const end = join(snapshotsAt, 'end.heapsnapshot');
      await inspector.heapSnapshot(end);
      growth = heapGrowth(summarizeHeap(warmSnapshot), summarizeHeap(end));
    }
    const measured = samples.filter((s) => s.minute >= warmUpMinutes);
    if (measured.length < 3) throw new Error(`only ${measured.length} samples after the warm-up: run longer or sample more often`);
    const heap = fitLine(measured.map((s) => ({ x: s.minute, y: s.heapMiB })));
    const rss = fitLine(measured.map((s) => ({ x: s.minute, y: s.rssMiB })));
    const window = measured.at(-1)!.minute - measured[0]!.minute;
    const drift = heap.slope * window;
    return {
      at: new Date().toISOString(),
      commit,
      machine: { cpus: cpus().length, model: cpus()[0]?.model ?? 'unknown', memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version },
      settings: { minutes, warmUpMinutes, epochSeconds, forests, children, sampleSeconds, serverEnv },
      epochs,
      forests: epochs * forests,
      requests,
      heap: {
        slopeMiBPerMinute: round(heap.slope, 4),
        slopeErrorMiBPerMinute: round(heap.slopeError, 4),
        driftMiB: round(drift, 3),
        spreadMiB: round(heap.spread, 3),
        flat: Math.abs(drift) <= heap.spread,
        // The slope over the forests disposed a minute in the measured window.
        bytesPerForest: Math.round((heap.slope * MiB) / (forestsIn(measured) / window)),
        afterWarmUpMiB: measured[0]!.heapMiB,
        endMiB: measured.at(-1)!.heapMiB,
      },
      rss: { slopeMiBPerMinute: round(rss.slope, 3), startMiB: samples[0]!.rssMiB, afterWarmUpMiB: measured[0]!.rssMiB, endMiB: samples.at(-1)!.rssMiB },
      eventLoopMs: { p99Max: Math.max(...samples.map((s) => s.eventLoopP99Ms)), max: Math.max(...samples.map((s) => s.eventLoopMaxMs)) },
      ...(growth === undefined ? {} : { heapGrowth: growth }),
      samples,
    };
  } finally {
    inspector.close();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

// The build measured: the commit, marked when the sources differ from it.
const commit = `${execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim()}${execFileSync('git', ['status', '--porcelain', 'src'], { cwd: root, encoding: 'utf8' }).trim() === '' ? '' : '+changes'}`;
buildServer();
const results = await main();
const { samples: _samples, heapGrowth: grew, ...summary } = results;
if (grew !== undefined) console.table(grew);
console.log(JSON.stringify(summary, null, 2));
const { heap, rss } = summary as { heap: { slopeMiBPerMinute: number; slopeErrorMiBPerMinute: number; driftMiB: number; spreadMiB: number; flat: boolean }; rss: { startMiB: number; endMiB: number } };
console.log(
  `heap after full collections: ${heap.slopeMiBPerMinute} ± ${heap.slopeErrorMiBPerMinute} MiB/min after the warm-up, a drift of ${heap.driftMiB} MiB ` +
    `against a spread of ${heap.spreadMiB} MiB: ${heap.flat ? 'flat' : 'GROWING'}; RSS ${rss.startMiB} → ${rss.endMiB} MiB`,
);
writeFileSync(join(root, 'bench', 'soak.json'), `${JSON.stringify(results, null, 2)}\n`);
