/**
 * Server CPU per one-step turn as a session's context grows: roots seeded with 10, 1,000 and
 * 10,000 messages (about 200 bytes of text each), each turn a followup, a claim and an output
 * without tool calls over HTTP, in two modes:
 *
 * - full: the default claim; `step.messages` holds the whole conversation;
 * - delta: the claim carries `since: <the root's previous stepId>` and the server answers
 *   `step.messagesSince` instead. A build whose claim refuses `since` (400) has no delta
 *   figures (`delta: null`); a claim with `since` answered with `step.messages` counts as a
 *   full fallback.
 *
 * Every case runs on one server, so they share the machine's weather: after a warm-up (a
 * turn on every root, then a round of each case), in each round every case runs for
 * `roundSeconds` (or up to its turn cap) in an order that rotates from round to round, and
 * its cost is the server's CPU time per turn (all its
 * threads, from /proc) summed over its rounds, with the ratio to the shortest sessions' cost
 * (and, for delta, to the full mode's at the same length).
 *
 * Each turn adds two messages (the followup and the output), so a case's drivers take turns
 * round-robin over a pool of roots, and each root takes at most max(10, length / 10) messages'
 * worth of turns over the whole run: sessions stay near their seeded length (the figures give
 * the mean context a claim saw). Run by `npm run bench` (results.json,
 * `scaling.stepContextMessages`), or alone:
 *
 *   npx tsx bench/step-context.ts [--lengths 10,1000,10000] [--agents 4] [--rounds 5] [--round-seconds 1] [--text-bytes 200]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildServer, call, pool, rootHeader, seedSessions, startServer, type Server } from './lib.js';

export interface StepContextOptions {
  /** A directory for the SQLite file. */
  dir: string;
  /** Start the server on the seeded file. */
  start(data: string): Promise<Server>;
  /** Seeded messages per session, shortest first: the first is the cases' baseline. */
  lengths?: number[];
  /** Drivers per case, each with its own pool of roots. */
  agents?: number;
  rounds?: number;
  roundSeconds?: number;
  /** Text bytes of each seeded message. */
  textBytes?: number;
}

type Mode = 'full' | 'delta';

/** One mode's cases, keyed by session length. */
export interface StepContextMode {
  /** The median round's turns per second. */
  turnsPerSecond: Record<string, number>;
  /** Server CPU time per turn over all rounds, in µs; null off Linux. */
  cpuUsPerTurn: Record<string, number | null>;
  /** Per round, in µs. */
  cpuUsRounds: Record<string, number[]>;
  /** CPU per turn over the shortest sessions' (throughput, shortest over case, off Linux). */
  costRatioToShortest: Record<string, number>;
  /** The mean number of context messages a measured claim covered (seeded, plus two a turn). */
  contextMessages: Record<string, number>;
  /** The mean claim response size, in KiB. */
  claimKiB: Record<string, number>;
  /** Measured turns. */
  turns: Record<string, number>;
  /** Delta only: claims with `since` answered in delta form, and answered with `step.messages` instead. */
  deltaClaims?: Record<string, number>;
  fullFallbacks?: Record<string, number>;
  /** Delta only: its CPU per turn over the full mode's at the same length. */
  costRatioToFull?: Record<string, number | null>;
}

export interface StepContextResult {
  setup: { lengths: number[]; agents: number; rounds: number; roundSeconds: number; textBytes: number; rootsPerDriver: Record<string, number>; turnsPerRootCap: Record<string, number> };
  full: StepContextMode;
  /** null when this build refuses `since` on a claim. */
  delta: StepContextMode | null;
  deltaNote?: string;
}

interface Root {
  id: string;
  token: string;
  /** Seeded messages. */
  length: number;
  turns: number;
  previousStep?: string;
}

interface Tally {
  turns: number;
  context: number;
  bytes: number;
  delta: number;
  fallbacks: number;
}

interface Case {
  label: string;
  mode: Mode;
  length: number;
  /** Per driver, its pool of roots and where it is in it. */
  drivers: { roots: Root[]; next: number }[];
  /** Turns one driver may take in one measured round. */
  capPerRound: number;
  rounds: { turns: number; seconds: number; cpu: number | undefined; tally: Tally }[];
}

/**
 * A claimed step's id and form, read from the head of its JSON (`{"step":{"id":…,"turnId":…,
 * "index":…,"messages":[` or `"messagesSince":[`): the driver does not parse the megabytes
 * after it, so on these 2 cores its own parsing does not crowd the server it measures.
 * Whether the messages are right is the test suite's (test/services/step-cache.test.ts).
 */
function stepHead(body: Buffer): { id: string; form: 'messages' | 'messagesSince' | undefined } {
  const head = body.subarray(0, 1024).toString();
  const match = /^\{"step":\{"id":("[^"]*"),"turnId":"[^"]*","index":\d+,"(messages|messagesSince)":\[/.exec(head);
  if (match === null) throw new Error(`a claimed step that does not start as the service writes it: ${head.slice(0, 200)}`);
  return { id: JSON.parse(match[1]!) as string, form: match[2] as 'messages' | 'messagesSince' };
}

/** A claim with `since` refused with 400: this build has no delta form. */
class DeltaRefused extends Error {}

const newTally = (): Tally => ({ turns: 0, context: 0, bytes: 0, delta: 0, fallbacks: 0 });

/**
 * One one-step turn on `root`: followup, claim (with `since` in delta mode once the root has
 * a step), output without tool calls. The claim's form is checked and tallied.
 */
async function turn(url: string, root: Root, mode: Mode, tally: Tally): Promise<void> {
  const token = { 'x-agent-token': root.token };
  await call(`${url}/v1/agents/${root.id}/messages`, 'POST', { content: 'go', delivery: 'followup' });
  const since = mode === 'delta' ? root.previousStep : undefined;
  const res = await fetch(`${url}/v1/agents/${root.id}/steps/next`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...token },
    body: JSON.stringify(since === undefined ? { waitMs: 1000 } : { waitMs: 1000, since }),
  });
  const body = Buffer.from(await res.arrayBuffer());
  if (res.status === 400 && since !== undefined) throw new DeltaRefused(body.toString());
  if (res.status !== 200) throw new Error(`claim of ${root.id}: ${res.status} ${body.toString()}`);
  const step = stepHead(body);
  if (since === undefined) {
    if (step.form !== 'messages') throw new Error(`claim of ${root.id} without since has no step.messages`);
  } else if (step.form === 'messagesSince') tally.delta++;
  else if (step.form === 'messages') tally.fallbacks++;
  else throw new Error(`claim of ${root.id} with since has neither step.messagesSince nor step.messages`);
  tally.turns++;
  // The seeded messages, two a turn before this one, and this turn's followup.
  tally.context += root.length + 2 * root.turns + 1;
  tally.bytes += body.length;
  const { turn: state } = await call<{ turn: string }>(`${url}/v1/agents/${root.id}/steps/${step.id}/output`, 'POST', { content: 'done' }, token);
  if (state !== 'ended') throw new Error(`the turn of ${root.id} did not end`);
  root.previousStep = step.id;
  root.turns++;
}

/**
 * Whether this build answers a claim with `since`: a fresh root's first turn, then a second
 * with `since`. A refusal (400) leaves the second turn's step claimable; it is claimed in the
 * full form and answered, so the root ends idle either way. Undefined when supported, else why not.
 */
async function deltaRefusal(s: Server): Promise<string | undefined> {
  const created = await call<{ agent: { id: string }; agentToken: string }>(`${s.url}/v1/agents`, 'POST', {});
  const probe: Root = { id: created.agent.id, token: created.agentToken, length: 0, turns: 0 };
  const tally = newTally();
  await turn(s.url, probe, 'delta', tally);
  try {
    await turn(s.url, probe, 'delta', tally);
    return undefined;
  } catch (error) {
    if (!(error instanceof DeltaRefused)) throw error;
    const token = { 'x-agent-token': probe.token };
    const { step } = await call<{ step: { id: string } }>(`${s.url}/v1/agents/${probe.id}/steps/next`, 'POST', { waitMs: 1000 }, token);
    await call(`${s.url}/v1/agents/${probe.id}/steps/${step.id}/output`, 'POST', { content: 'done' }, token);
    let why = error.message.slice(0, 200);
    try {
      const body = JSON.parse(error.message) as { code?: string; message?: string };
      why = `${body.code}: ${body.message}`;
    } catch {
      // not JSON: the text as it came
    }
    return `not supported by this build (a claim with since answered 400 ${why})`;
  }
}

/** The turns each root may take over the whole run: max(10, length / 10) messages' worth. */
const turnsPerRoot = (length: number): number => Math.ceil(Math.max(10, length / 10) / 2);
/** Roots per driver: 4,000 seeded messages' worth, 1 to 100. */
const rootsPerDriver = (length: number): number => Math.min(100, Math.max(1, Math.ceil(4000 / length)));

export async function stepContextCases(options: StepContextOptions): Promise<StepContextResult> {
  const lengths = options.lengths ?? [10, 1_000, 10_000];
  const agents = options.agents ?? 4;
  const rounds = options.rounds ?? 5;
  const roundSeconds = options.roundSeconds ?? 1;
  const textBytes = options.textBytes ?? 200;
  const modes: Mode[] = ['full', 'delta'];
  const plan = modes.flatMap((mode) => lengths.map((length) => ({
    mode,
    length,
    ids: Array.from({ length: agents }, (_, d) => Array.from({ length: rootsPerDriver(length) }, (_, p) => `ctx-${mode}-${length}-${d}-${p}`)),
  })));
  const data = join(options.dir, 'step-context.db');
  await seedSessions(data, plan.flatMap((c) => c.ids.flat().map((id) => ({ header: rootHeader(id), entries: c.length }))), { textBytes });
  const s = await options.start(data);
  const deltaNote = await deltaRefusal(s);
  const resume = async (id: string, length: number): Promise<Root> => {
    const { agentToken } = await call<{ agentToken: string }>(`${s.url}/v1/agents/${id}/resume`, 'POST');
    return { id, token: agentToken, length, turns: 0 };
  };
  const cases: Case[] = [];
  for (const c of plan) {
    if (c.mode === 'delta' && deltaNote !== undefined) continue;
    const drivers: Case['drivers'] = [];
    for (const ids of c.ids) {
      const roots: Root[] = new Array<Root>(ids.length);
      await pool(ids.length, 8, async (i) => {
        roots[i] = await resume(ids[i]!, c.length);
      });
      drivers.push({ roots, next: 0 });
    }
    // The warm-up takes one turn on every root, then one round like the measured ones; the
    // rounds share what is left of the cap.
    const capPerRound = Math.max(1, Math.floor((rootsPerDriver(c.length) * (turnsPerRoot(c.length) - 1)) / (rounds + 1)));
    cases.push({ label: `${c.mode} ${c.length}`, mode: c.mode, length: c.length, drivers, capPerRound, rounds: [] });
  }
  const run = async (c: Case, cap: number, seconds: number, tally: Tally): Promise<void> => {
    const end = performance.now() + seconds * 1000;
    await Promise.all(c.drivers.map(async (driver) => {
      for (let n = 0; n < cap && performance.now() < end; n++) {
        await turn(s.url, driver.roots[driver.next++ % driver.roots.length]!, c.mode, tally);
      }
    }));
  };
  // Warm-up: a turn on every root (each then has a previous step to claim `since`), then a
  // round of each case (without it the first measured round cost a third more than the rest).
  for (const c of cases) await run(c, c.drivers[0]!.roots.length, Infinity, newTally());
  for (const c of cases) await run(c, c.capPerRound, roundSeconds, newTally());
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < cases.length; k++) {
      const c = cases[(r + k) % cases.length]!;
      const tally = newTally();
      const before = s.cpuSeconds();
      const began = performance.now();
      await run(c, c.capPerRound, roundSeconds, tally);
      const seconds = (performance.now() - began) / 1000;
      const after = s.cpuSeconds();
      c.rounds.push({ turns: tally.turns, seconds, cpu: before === undefined || after === undefined ? undefined : after - before, tally });
    }
  }
  const us = (cpu: number, turns: number): number => +((cpu / turns) * 1e6).toFixed(1);
  const summary = (mode: Mode, full?: StepContextMode): StepContextMode => {
    const own = cases.filter((c) => c.mode === mode);
    const each = <T>(f: (c: Case) => T): Record<string, T> => Object.fromEntries(own.map((c) => [String(c.length), f(c)]));
    const sum = (c: Case, f: (x: Case['rounds'][number]) => number): number => c.rounds.reduce((a, x) => a + f(x), 0);
    const known = (c: Case): boolean => c.rounds.every((x) => x.cpu !== undefined);
    const cpuUs = (c: Case): number | null => (known(c) ? us(sum(c, (x) => x.cpu!), sum(c, (x) => x.turns)) : null);
    const rate = (c: Case): number => {
      const sorted = c.rounds.map((x) => x.turns / x.seconds).sort((a, b) => a - b);
      return Math.round(sorted[Math.floor(sorted.length / 2)]!);
    };
    const base = own[0]!;
    const cost = (c: Case): number => {
      const [a, b] = [cpuUs(c), cpuUs(base)];
      return +(a !== null && b !== null ? a / b : rate(base) / rate(c)).toFixed(3);
    };
    const tallied = (c: Case, f: (t: Tally) => number): number => sum(c, (x) => f(x.tally));
    return {
      turnsPerSecond: each(rate),
      cpuUsPerTurn: each(cpuUs),
      cpuUsRounds: each((c) => (known(c) ? c.rounds.map((x) => us(x.cpu!, x.turns)) : [])),
      costRatioToShortest: each(cost),
      contextMessages: each((c) => Math.round(tallied(c, (t) => t.context) / tallied(c, (t) => t.turns))),
      claimKiB: each((c) => +(tallied(c, (t) => t.bytes) / tallied(c, (t) => t.turns) / 1024).toFixed(1)),
      turns: each((c) => tallied(c, (t) => t.turns)),
      ...(mode === 'delta' ? { deltaClaims: each((c) => tallied(c, (t) => t.delta)), fullFallbacks: each((c) => tallied(c, (t) => t.fallbacks)) } : {}),
      ...(full === undefined ? {} : { costRatioToFull: each((c) => {
        const [a, b] = [cpuUs(c), full.cpuUsPerTurn[String(c.length)] ?? null];
        return a !== null && b !== null ? +(a / b).toFixed(3) : null;
      }) }),
    };
  };
  const full = summary('full');
  return {
    setup: {
      lengths,
      agents,
      rounds,
      roundSeconds,
      textBytes,
      rootsPerDriver: Object.fromEntries(lengths.map((l) => [String(l), rootsPerDriver(l)])),
      turnsPerRootCap: Object.fromEntries(lengths.map((l) => [String(l), turnsPerRoot(l)])),
    },
    full,
    delta: deltaNote === undefined ? summary('delta', full) : null,
    ...(deltaNote === undefined ? {} : { deltaNote }),
  };
}

/** Table rows: one per mode and session length. */
export function stepContextRows(result: StepContextResult): Record<string, unknown>[] {
  const rows: Record<string, unknown>[] = [];
  for (const mode of ['full', 'delta'] as const) {
    const m = result[mode];
    if (m === null) {
      rows.push({ scenario: `one-step turn, ${mode}: ${result.deltaNote ?? 'not measured'}` });
      continue;
    }
    for (const length of result.setup.lengths.map(String)) {
      rows.push({
        scenario: `one-step turn, ${length} context messages, ${mode}`,
        rps: m.turnsPerSecond[length],
        cpuUs: m.cpuUsPerTurn[length],
        costRatio: m.costRatioToShortest[length],
        contextMessages: m.contextMessages[length],
        claimKiB: m.claimKiB[length],
        ...(m.costRatioToFull === undefined ? {} : { overFull: m.costRatioToFull[length] }),
        ...(m.fullFallbacks === undefined ? {} : { fullFallbacks: m.fullFallbacks[length] }),
      });
    }
  }
  return rows;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const arg = (name: string, fallback: number): number => {
    const i = process.argv.indexOf(`--${name}`);
    const value = i === -1 ? fallback : Number(process.argv[i + 1]);
    if (!(value > 0)) throw new Error(`--${name} must be a positive number`);
    return value;
  };
  const i = process.argv.indexOf('--lengths');
  const lengths = i === -1 ? undefined : (process.argv[i + 1] ?? '').split(',').map(Number);
  if (lengths !== undefined && !lengths.every((l, k) => Number.isInteger(l) && l > 0 && (k === 0 || l > lengths[k - 1]!))) {
    throw new Error('--lengths must be whole numbers, shortest first (10,1000,10000)');
  }
  const dir = mkdtempSync(join(tmpdir(), 'agentforest-step-context-'));
  const servers: Server[] = [];
  try {
    buildServer();
    const began = performance.now();
    const result = await stepContextCases({
      dir,
      start: async (data) => {
        const s = await startServer(data, { AGENTFOREST_SQLITE_SYNCHRONOUS: 'normal' });
        servers.push(s);
        return s;
      },
      ...(lengths === undefined ? {} : { lengths }),
      agents: arg('agents', 4),
      rounds: arg('rounds', 5),
      roundSeconds: arg('round-seconds', 1),
      textBytes: arg('text-bytes', 200),
    });
    console.table(stepContextRows(result));
    console.log(JSON.stringify(result, null, 2));
    console.log(`measured in ${((performance.now() - began) / 1000).toFixed(1)} s (build not included)`);
  } finally {
    for (const s of servers) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
