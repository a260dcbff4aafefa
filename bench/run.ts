/**
 * `npm run bench`: how fast, how big, and how cost grows. Servers run in their own processes
 * on 127.0.0.1; autocannon (in this process) is the load generator. Every figure that matters
 * is a ratio to a baseline measured in the same run: the app's own baseline route, and a truly
 * bare Fastify server (bench/bare-server.ts) beside it. Prints one table and writes
 * bench/results.json. Bounded: it stops by itself (a few minutes on 2 cores). The step-context
 * and budget-claims sections (bench/step-context.ts, bench/budget-claims.ts) also run alone.
 *
 *   npm run bench -- [--seconds 4] [--rounds 5] [--round-seconds 2] [--agents 100000] [--entries 100000]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { arg, buildServer, call, childHeader, load, pool, root, rootHeader, seedSessions, settledMemory, startBareServer, startServer, warmUp, type Load, type Server } from './lib.js';
import { budgetClaimCases, budgetClaimRows, type BudgetClaimResult } from './budget-claims.js';
import { stepContextCases, stepContextRows, type StepContextResult } from './step-context.js';

const seconds = arg('seconds', 4);
// The two ratios: rounds of baseline then report, each route measured this long per round.
const rounds = arg('rounds', 5);
const roundSeconds = arg('round-seconds', 2);
const manyAgents = arg('agents', 100_000);
const longSession = arg('entries', 100_000);
const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-'));
const report = { name: 'report', input: { output: 'a finding worth reporting to the parent' } };
// The wakeup case queues one parent turn per report, a backlog that grows without limit; it
// measures throughput, not the inbox bound (bench/wakeup-storm.ts does that). Every other
// case runs with the default limits.
const unbounded = { AGENTFOREST_MAX_INBOX: String(2 ** 31) };

interface Agent {
  id: string;
  token: string;
}

async function newRoot(s: Server, id?: string): Promise<Agent> {
  const r = await call<{ agent: { id: string }; agentToken: string }>(`${s.url}/v1/agents`, 'POST', id === undefined ? {} : { id });
  return { id: r.agent.id, token: r.agentToken };
}

async function newChild(s: Server, parent: Agent): Promise<Agent> {
  const r = await call<{ agent: { id: string }; agentToken: string }>(`${s.url}/v1/agents/${parent.id}/children`, 'POST', { mode: 'continuable', prompt: 'work and report' }, { 'x-agent-token': parent.token });
  return { id: r.agent.id, token: r.agentToken };
}

/** Claim the agent's step and answer it without tool calls: its turn ends. */
async function endTurn(s: Server, agent: Agent): Promise<void> {
  const token = { 'x-agent-token': agent.token };
  const { step } = await call<{ step: { id: string } }>(`${s.url}/v1/agents/${agent.id}/steps/next`, 'POST', { waitMs: 1000 }, token);
  const { turn } = await call<{ turn: string }>(`${s.url}/v1/agents/${agent.id}/steps/${step.id}/output`, 'POST', { content: 'done' }, token);
  if (turn !== 'ended') throw new Error(`the turn of ${agent.id} did not end`);
}

/**
 * The reporting child of every report case: a continuable child that started a child of its
 * own and ended its first turn, so it stays live and idle, waiting, rather than settling. Each
 * report is then complete when acknowledged: the call and its result are logged in the child
 * and the report in its idle parent, three durable entries, under the default limits. (A
 * child that reports between steps of an open turn stages the call and its result instead,
 * written at its next step; a bench that never takes that step would pile up a backlog the
 * default inbox limit forbids and never pay for writing it.)
 */
async function reportingChild(s: Server, parent: Agent): Promise<Agent> {
  const child = await newChild(s, parent);
  await newChild(s, child);
  await endTurn(s, child);
  return child;
}

const reportLoad = (s: Server, child: Agent, secs = seconds): Promise<Load> =>
  load(`${s.url}/v1/agents/${child.id}/tool-calls`, report, { 'x-agent-token': child.token }, secs);

/** CPU time per request, in µs: the whole server's and its main thread's. */
interface CpuPerRequest {
  serverUs: number;
  mainThreadUs: number;
}

interface Paired {
  ratio: number;
  cpuRatio: number | null;
  /** Over all rounds, per route (bare: the truly bare Fastify server's route); null off Linux. */
  cpu: { bare: CpuPerRequest; base: CpuPerRequest; rep: CpuPerRequest } | null;
  /** Server CPU per request of the app's baseline route over the bare route's, and each round's. */
  baseOverBare: number | null;
  baseOverBareRounds: number[];
  /** Server CPU per request of the report over the bare route's. */
  repOverBare: number | null;
  bare: Load;
  base: Load;
  rep: Load;
  ratios: number[];
}

/**
 * Report throughput over the baseline's on one server: after one warm-up of each route,
 * `rounds` rounds of baseline then report, `roundSeconds` each, and the median of the
 * per-round ratios. Neighbours on a shared machine shift throughput by a fifth or more within
 * seconds; rounds side by side see the same conditions, and the median drops the ones that
 * did not. Beside it, the server's CPU time per request over all rounds (baseline over
 * report, from /proc), which what neighbours take from the machine moves much less, and its
 * main thread's: the event loop runs every request, so once it is busy all the time, its
 * time per request bounds the throughput.
 */
async function pairedRatio(s: Server, child: Agent, bare: Server): Promise<Paired> {
  const bareUrl = `${bare.url}/bench/baseline`;
  const baseUrl = `${s.url}/bench/baseline`;
  const reportUrl = `${s.url}/v1/agents/${child.id}/tool-calls`;
  // Both routes get the same request, the agent token header included: the baseline ignores
  // it, so the ratio holds only what the report path itself costs.
  const token = { 'x-agent-token': child.token };
  await warmUp(bareUrl, report, token, 2);
  await warmUp(baseUrl, report, token, 2);
  await warmUp(reportUrl, report, token, 2);
  type Route = 'bare' | 'base' | 'rep';
  // CPU seconds (the server's, its main thread's) and requests of each route over all rounds.
  const cpu = { bare: { server: 0, main: 0 }, base: { server: 0, main: 0 }, rep: { server: 0, main: 0 } };
  let cpuKnown = true;
  const requests = { bare: 0, base: 0, rep: 0 };
  const measured = async (url: string, route: Route): Promise<Load & { cpuUs: number | undefined }> => {
    const on = route === 'bare' ? bare : s;
    const before = [on.cpuSeconds(), on.mainThreadCpuSeconds()];
    const l = await load(url, report, token, roundSeconds, 50, 0);
    const after = [on.cpuSeconds(), on.mainThreadCpuSeconds()];
    let cpuUs: number | undefined;
    if ([...before, ...after].some((x) => x === undefined)) cpuKnown = false;
    else {
      cpu[route].server += after[0]! - before[0]!;
      cpu[route].main += after[1]! - before[1]!;
      cpuUs = ((after[0]! - before[0]!) / l.requests) * 1e6;
    }
    requests[route] += l.requests;
    return { ...l, cpuUs };
  };
  const all: { bare: Load; base: Load; rep: Load; ratio: number; baseOverBare: number | undefined }[] = [];
  for (let i = 0; i < rounds; i++) {
    const bareRound = await measured(bareUrl, 'bare');
    const base = await measured(baseUrl, 'base');
    const rep = await measured(reportUrl, 'rep');
    const baseOverBare = base.cpuUs === undefined || bareRound.cpuUs === undefined ? undefined : ratio(base.cpuUs, bareRound.cpuUs);
    all.push({ bare: bareRound, base, rep, ratio: ratio(rep.requestsPerSecond, base.requestsPerSecond), baseOverBare });
  }
  const mid = [...all].sort((a, b) => a.ratio - b.ratio)[Math.floor(all.length / 2)]!;
  // Summed over the rounds rather than a median: work a round leaves behind (the writer's
  // queue, a collection) is counted in the next round's window, which sums even out.
  const perRequest = (route: Route): CpuPerRequest => ({
    serverUs: +((cpu[route].server / requests[route]) * 1e6).toFixed(1),
    mainThreadUs: +((cpu[route].main / requests[route]) * 1e6).toFixed(1),
  });
  const cpuRatio = cpuKnown ? ratio(cpu.base.server / requests.base, cpu.rep.server / requests.rep) : null;
  const perRoute = cpuKnown ? { bare: perRequest('bare'), base: perRequest('base'), rep: perRequest('rep') } : null;
  const overBare = (route: Route): number | null => (cpuKnown ? ratio(cpu[route].server / requests[route], cpu.bare.server / requests.bare) : null);
  return {
    ratio: mid.ratio,
    cpuRatio,
    cpu: perRoute,
    baseOverBare: overBare('base'),
    baseOverBareRounds: all.flatMap((r) => (r.baseOverBare === undefined ? [] : [r.baseOverBare])),
    repOverBare: overBare('rep'),
    bare: mid.bare,
    base: mid.base,
    rep: mid.rep,
    ratios: all.map((r) => r.ratio),
  };
}

/** A scaling case's report cost: its throughput and the server's CPU time per report. */
interface ScalingCase {
  /** The median round's reports per second. */
  rps: number;
  /** Server CPU time per report over all rounds, in µs; null off Linux. */
  cpuUs: number | null;
  /** Per round, in µs. */
  cpuUsRounds: number[];
}

/**
 * The cases of one scaling question (say 1, 1,000 and 100,000 live agents), each a reporting
 * child on its server, measured in turns: every case is warmed up for 1 s, then in each of six
 * rounds every case runs 2 s of reports, in an order that rotates from round to round. A
 * case's cost is the server's CPU time per report over its rounds; the cases saw the same
 * stretch of the machine's weather. (Measured one after the other, each against a baseline
 * beside it, the one-agent case's CPU ratio alone moved from 0.40 to 0.57 between runs of the
 * same code, and a 2-s round's CPU per report moves by a third either way, so there are twice
 * as many report rounds as before in the time the baselines took.)
 */
async function scalingCases(cases: Record<string, { server: Server; child: Agent }>): Promise<Record<string, ScalingCase>> {
  const labels = Object.keys(cases);
  /** Per case, each round's throughput, requests and server CPU seconds (undefined off Linux). */
  const byCase = new Map(labels.map((label) => [label, [] as { rps: number; requests: number; cpu: number | undefined }[]]));
  const args = (label: string): [string, unknown, Record<string, string>] => {
    const { server, child } = cases[label]!;
    return [`${server.url}/v1/agents/${child.id}/tool-calls`, report, { 'x-agent-token': child.token }];
  };
  for (const label of labels) await warmUp(...args(label), 1);
  for (let r = 0; r < 6; r++) {
    for (let k = 0; k < labels.length; k++) {
      const label = labels[(r + k) % labels.length]!;
      const server = cases[label]!.server;
      const before = server.cpuSeconds();
      const l = await load(...args(label), 2, 50, 0);
      const after = server.cpuSeconds();
      byCase.get(label)!.push({ rps: l.requestsPerSecond, requests: l.requests, cpu: before === undefined || after === undefined ? undefined : after - before });
    }
  }
  const us = (cpu: number, requests: number): number => +((cpu / requests) * 1e6).toFixed(1);
  return Object.fromEntries(labels.map((label) => {
    const own = byCase.get(label)!;
    const rps = own.map((x) => x.rps).sort((a, b) => a - b);
    const known = own.every((x) => x.cpu !== undefined);
    const sum = (f: (x: (typeof own)[number]) => number): number => own.reduce((a, x) => a + f(x), 0);
    return [label, {
      rps: rps[Math.floor(rps.length / 2)]!,
      cpuUs: known ? us(sum((x) => x.cpu!), sum((x) => x.requests)) : null,
      cpuUsRounds: known ? own.map((x) => us(x.cpu!, x.requests)) : [],
    }];
  }));
}

/** Turns per second: each worker drives its own root through followup, claim and output. */
async function stepRoundTrips(s: Server, workers: number): Promise<number> {
  const roots = await Promise.all(Array.from({ length: workers }, () => newRoot(s)));
  let turns = 0;
  const end = Date.now() + seconds * 1000;
  await Promise.all(roots.map(async (agent) => {
    const token = { 'x-agent-token': agent.token };
    while (Date.now() < end) {
      await call(`${s.url}/v1/agents/${agent.id}/messages`, 'POST', { content: 'go', delivery: 'followup' });
      const { step } = await call<{ step: { id: string } }>(`${s.url}/v1/agents/${agent.id}/steps/next`, 'POST', { waitMs: 1000 }, token);
      await call(`${s.url}/v1/agents/${agent.id}/steps/${step.id}/output`, 'POST', { content: 'done' }, token);
      turns++;
    }
  }));
  return Math.round(turns / seconds);
}

const ratio = (a: number, b: number): number => +(a / b).toFixed(3);
const mainThreadRatio = (cpu: Paired['cpu']): number | null => (cpu === null ? null : ratio(cpu.base.mainThreadUs, cpu.rep.mainThreadUs));
const cpuColumns = (cpu: CpuPerRequest | undefined): Record<string, number> =>
  cpu === undefined ? {} : { cpuUs: cpu.serverUs, mainThreadUs: cpu.mainThreadUs };
const rows: Record<string, unknown>[] = [];
const row = (scenario: string, l: Load, extra: Record<string, unknown> = {}): void => {
  rows.push({ scenario, rps: l.requestsPerSecond, p50Ms: l.p50Ms, p99Ms: l.p99Ms, errors: l.errors, ...extra });
};

async function main(): Promise<Record<string, unknown>> {
  // 1. Report throughput against the app's baseline route, durable SQLite and memory, and
  // both against a truly bare Fastify route (no logger, no hooks, the same validated body):
  // the app's baseline over the bare route is what the app adds to every request.
  const bare = await startBareServer();
  try {
    return await measure(bare);
  } finally {
    await bare.stop();
  }
}

async function measure(bare: Server): Promise<Record<string, unknown>> {
  const durable = await startServer(join(dir, 'durable.db'), unbounded);
  let durableRatio: number;
  let durableRatios: number[];
  let durableCpuRatio: number | null;
  let durableCpu: Paired['cpu'];
  let durableOverBare: Pick<Paired, 'baseOverBare' | 'baseOverBareRounds' | 'repOverBare'>;
  let wakeup: Load;
  let steps: number;
  try {
    const child = await reportingChild(durable, await newRoot(durable));
    const paired = await pairedRatio(durable, child, bare);
    durableRatio = paired.ratio;
    durableRatios = paired.ratios;
    durableCpuRatio = paired.cpuRatio;
    durableCpu = paired.cpu;
    durableOverBare = paired;
    row('bare Fastify route (no logger, no hooks), beside sqlite', paired.bare, cpuColumns(paired.cpu?.bare));
    row('baseline route (sqlite build)', paired.base, { cpuOverBare: paired.baseOverBare, ...cpuColumns(paired.cpu?.base) });
    row('report quiet, sqlite FULL', paired.rep, { ratioToBaseline: durableRatio, cpuRatio: durableCpuRatio, cpuOverBare: paired.repOverBare, ...cpuColumns(paired.cpu?.rep) });
    // Wakeup to a running parent: its turn is open (step claimed), each report queues one turn.
    await call(`${durable.url}/v1/packages/subagent-report`, 'PUT', { config: { reportDelivery: 'wakeup' } });
    const busy = await newRoot(durable);
    await call(`${durable.url}/v1/agents/${busy.id}/messages`, 'POST', { content: 'work', delivery: 'followup' });
    await call(`${durable.url}/v1/agents/${busy.id}/steps/next`, 'POST', { waitMs: 1000 }, { 'x-agent-token': busy.token });
    wakeup = await reportLoad(durable, await reportingChild(durable, busy));
    row('report wakeup to a running parent, sqlite', wakeup);
    steps = await stepRoundTrips(durable, 20);
    rows.push({ scenario: 'step round trips (followup, claim, output), 20 drivers', rps: steps });
  } finally {
    await durable.stop();
  }
  const memory = await startServer(':memory:');
  let memoryRatio: number;
  let memoryRatios: number[];
  let memoryCpuRatio: number | null;
  let memoryCpu: Paired['cpu'];
  let memoryOverBare: Pick<Paired, 'baseOverBare' | 'baseOverBareRounds' | 'repOverBare'>;
  try {
    const paired = await pairedRatio(memory, await reportingChild(memory, await newRoot(memory)), bare);
    memoryRatio = paired.ratio;
    memoryRatios = paired.ratios;
    memoryCpuRatio = paired.cpuRatio;
    memoryCpu = paired.cpu;
    memoryOverBare = paired;
    row('bare Fastify route (no logger, no hooks), beside memory', paired.bare, cpuColumns(paired.cpu?.bare));
    row('baseline route (memory build)', paired.base, { cpuOverBare: paired.baseOverBare, ...cpuColumns(paired.cpu?.base) });
    row('report quiet, memory store', paired.rep, { ratioToBaseline: memoryRatio, cpuRatio: memoryCpuRatio, cpuOverBare: paired.repOverBare, ...cpuColumns(paired.cpu?.rep) });
  } finally {
    await memory.stop();
  }

  // 2. Live agents: memory per idle resident agent, then report cost with 1, 1,000 and
  // `manyAgents` of them, each case on a server of its own (the large one after the memory
  // readings), all three measured in turns. Each reports from a fresh child, so each starts
  // from the same session length.
  //
  // Memory per idle resident agent is read first, on a server that did nothing else yet
  // (resident memory rarely shrinks, so any earlier load would blur it), after a full garbage
  // collection. The first 1,000 roots are a warm-up outside the count: they pay one-off costs
  // (the create path's compiled code, the SQLite page caches filling up to their bound). The
  // young generation's committed pages are taken out: empty after the collection, they hold no
  // agent, and they grow with allocation up to a size --max-semi-space-size sets (32 MB per
  // semi-space with `npm start`), once, within the first few thousand roots.
  const normal = { AGENTFOREST_SQLITE_SYNCHRONOUS: 'normal' };
  const servers: Server[] = [];
  const started = async (name: string, data: string = join(dir, `${name}.db`)): Promise<Server> => {
    const s = await startServer(data, normal);
    servers.push(s);
    return s;
  };
  const rssPerAgent: Record<string, number> = {};
  const rssPerAgentWithYoung: Record<string, number> = {};
  const youngGenerationBytes: Record<string, number> = {};
  let agentsScaling: Record<string, ScalingCase>;
  let sessionScaling: Record<string, ScalingCase>;
  let depthScaling: Record<string, ScalingCase>;
  let stepContext: StepContextResult;
  let budgetClaims: BudgetClaimResult;
  const coldResumeMs: Record<string, number> = {};
  try {
    const many = await started('many');
    const warmUp = 1_000;
    await pool(warmUp, 64, async () => {
      await newRoot(many);
    });
    const before = await settledMemory(many.url);
    youngGenerationBytes.before = before.youngGeneration;
    let created = 0;
    for (const target of [10_000, manyAgents]) {
      await pool(target - created, 64, async () => {
        await newRoot(many);
      });
      created = target;
      const after = await settledMemory(many.url);
      youngGenerationBytes[String(target)] = after.youngGeneration;
      rssPerAgent[String(target)] = Math.round((after.rss - after.youngGeneration - (before.rss - before.youngGeneration)) / target);
      rssPerAgentWithYoung[String(target)] = Math.round((after.rss - before.rss) / target);
    }
    const one = await started('one');
    const thousand = await started('thousand');
    await pool(1_000, 64, async () => {
      await newRoot(thousand);
    });
    const reporterOn = async (server: Server): Promise<{ server: Server; child: Agent }> => ({ server, child: await reportingChild(server, await newRoot(server)) });
    agentsScaling = await scalingCases({ '1': await reporterOn(one), '1000': await reporterOn(thousand), [String(manyAgents)]: await reporterOn(many) });
    for (const s of servers.splice(0)) await s.stop();

    // 3. Long sessions: a parent with 10 vs `longSession` entries, both on one server and
    // measured in turns; cold resume of such children.
    const seeded = join(dir, 'seeded.db');
    await seedSessions(seeded, [
      { header: rootHeader('short-parent'), entries: 10 },
      { header: rootHeader('long-parent'), entries: longSession },
      ...[0, 1, 2].map((i) => ({ header: childHeader(`short-child-${i}`, 'short-parent'), entries: 10 })),
      ...[0, 1, 2].map((i) => ({ header: childHeader(`long-child-${i}`, 'long-parent'), entries: longSession })),
    ]);
    const sessions = await started('seeded', seeded);
    const sessionCases: Record<string, { server: Server; child: Agent }> = {};
    for (const [label, id] of [['10', 'short-parent'], [String(longSession), 'long-parent']] as const) {
      const resumed = await call<{ agentToken: string }>(`${sessions.url}/v1/agents/${id}/resume`, 'POST');
      const parent = { id, token: resumed.agentToken };
      const prefix = label === '10' ? 'short' : 'long';
      const times: number[] = [];
      for (const i of [0, 1, 2]) {
        const t = performance.now();
        await call(`${sessions.url}/v1/agents/${prefix}-child-${i}/messages`, 'POST', { content: 'more work', delivery: 'followup' }, { 'x-agent-token': parent.token });
        times.push(performance.now() - t);
      }
      coldResumeMs[label] = +(times.reduce((a, b) => a + b, 0) / times.length).toFixed(2);
      sessionCases[label] = { server: sessions, child: await reportingChild(sessions, parent) };
    }
    sessionScaling = await scalingCases(sessionCases);
    for (const s of servers.splice(0)) await s.stop();

    // 4. Forest depth: a report from depth 1 vs depth 50 to its direct parent, both on one
    // server, measured in turns. At both depths the reporter and its parent are idle: every
    // child of the chain owns the next one and ended its first turn, so it waits.
    const deep = await started('deep');
    const first = await reportingChild(deep, await newRoot(deep));
    const chain = [first];
    for (let depth = 2; depth <= 50; depth++) chain.push(await newChild(deep, chain.at(-1)!));
    await newChild(deep, chain.at(-1)!);
    for (const agent of chain.slice(1)) await endTurn(deep, agent);
    depthScaling = await scalingCases({ '1': { server: deep, child: first }, '50': { server: deep, child: chain.at(-1)! } });
    for (const s of servers.splice(0)) await s.stop();

    // 5. Step context: server CPU per one-step turn on roots of 10, 1,000 and 10,000 messages,
    // full steps and delta steps (claims with `since`), all on one server (bench/step-context.ts).
    stepContext = await stepContextCases({ dir, start: (data) => started('step-context', data) });
    rows.push(...stepContextRows(stepContext));
    for (const s of servers.splice(0)) await s.stop();

    // 6. Tree budgets: server CPU per one-step turn of an agent at depth 1 and 50, budgets on
    // (every agent of its chain limited) over off, memory store and SQLite, each store's cases
    // on one server (bench/budget-claims.ts). It stops its servers itself.
    budgetClaims = await budgetClaimCases({ dir, start: (data, env) => startServer(data, { ...normal, ...env }) });
    rows.push(...budgetClaimRows(budgetClaims));
  } finally {
    for (const s of servers) await s.stop();
  }

  // Each case's cost relative to the smallest case's: its CPU time per report over the
  // smallest case's (throughput, smallest over case, where /proc is missing).
  const scale = (table: Record<string, ScalingCase>, small: string, costKey: string): Record<string, Record<string, unknown>> => {
    const base = table[small]!;
    const cost = (c: ScalingCase): number => (c.cpuUs !== null && base.cpuUs !== null ? ratio(c.cpuUs, base.cpuUs) : ratio(base.rps, c.rps));
    const each = <T>(f: (c: ScalingCase) => T): Record<string, T> => Object.fromEntries(Object.entries(table).map(([k, v]) => [k, f(v)]));
    return { rps: each((c) => c.rps), cpuUsPerReport: each((c) => c.cpuUs), cpuUsRounds: each((c) => c.cpuUsRounds), [costKey]: each(cost) };
  };
  return {
    at: new Date().toISOString(),
    machine: { cpus: cpus().length, model: cpus()[0]?.model ?? 'unknown', memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version },
    seconds,
    durableRatio,
    memoryRatio,
    // Each ratio is the median of these rounds (baseline then report, side by side).
    ratioRounds: { durable: durableRatios, memory: memoryRatios },
    // The server's CPU time per request, baseline over report, over the same rounds.
    cpuRatios: { durable: durableCpuRatio, memory: memoryCpuRatio },
    // The same per route in µs, the whole server's and its main thread's, and the main
    // thread's ratio: the ceiling of the throughput ratio once the event loop is saturated.
    cpuPerRequest: { durable: durableCpu, memory: memoryCpu },
    mainThreadRatios: { durable: mainThreadRatio(durableCpu), memory: mainThreadRatio(memoryCpu) },
    // Server CPU per request over the truly bare Fastify route's, over the same rounds: the
    // app's baseline route (what the app adds to every request; per round, for the spread)
    // and the report.
    overBare: {
      durable: { baseline: durableOverBare.baseOverBare, baselineRounds: durableOverBare.baseOverBareRounds, report: durableOverBare.repOverBare },
      memory: { baseline: memoryOverBare.baseOverBare, baselineRounds: memoryOverBare.baseOverBareRounds, report: memoryOverBare.repOverBare },
    },
    wakeupRps: wakeup.requestsPerSecond,
    stepRoundTripsPerSecond: steps,
    scaling: {
      liveAgents: scale(agentsScaling, '1', 'costRatioToOne'),
      parentSessionEntries: scale(sessionScaling, '10', 'costRatioToTen'),
      forestDepth: scale(depthScaling, '1', 'costRatioToOne'),
      stepContextMessages: stepContext,
    },
    // Server CPU per one-step turn, budgets on over off, at depth 1 and 50 (bench/budget-claims.ts).
    budgetClaims,
    coldResumeMs: { ...coldResumeMs, ratio: ratio(coldResumeMs[String(longSession)]!, coldResumeMs['10']!) },
    rssBytesPerIdleAgent: rssPerAgent,
    rssBytesPerIdleAgentWithYoungGeneration: rssPerAgentWithYoung,
    youngGenerationBytes,
    rows,
  };
}

try {
  buildServer();
  const results = await main();
  console.table(rows);
  console.log(JSON.stringify({ ...results, rows: undefined }, null, 2));
  const over = results.overBare as Record<string, { baseline: number | null; baselineRounds: number[]; report: number | null }>;
  for (const [store, o] of Object.entries(over)) {
    console.log(`${store}: app baseline / bare Fastify CPU per request ${o.baseline} (rounds ${o.baselineRounds.join(', ')}); report / bare ${o.report}`);
  }
  for (const [store, b] of Object.entries((results.budgetClaims as BudgetClaimResult).stores)) {
    const each = Object.keys(b.onOverOff).map((d) => `depth ${d} ${b.onOverOff[d]} (rounds ${b.onOverOffRounds[d]!.join(', ')}; ${b.onMinusOffUs[d]} µs)`);
    console.log(`${store}: budgets on / off, server CPU per turn: ${each.join('; ')}`);
  }
  writeFileSync(join(root, 'bench', 'results.json'), `${JSON.stringify(results, null, 2)}\n`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
