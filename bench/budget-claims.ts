/**
 * What tree budgets cost a turn: server CPU per one-step turn of an agent at depth 1 and at
 * depth 50, with budgets on against budgets off, as ratios measured in one run on one server
 * per store (the memory store and durable SQLite). Target: on / off ≤ 1.1 at both depths.
 *
 * Each case is a forest of its own: a root, a chain of children down to depth D - 1 (root →
 * child → … ; at D = 1 the root itself), and under that last one `agents` sibling leaves at
 * depth D, the measured agents, one per driver. Every agent is created over HTTP with its
 * parent's token. In the budgets-on arm every agent of the chain, the root and the leaves
 * included, has a generous budget (tokens, steps and cost far beyond what the run spends, each
 * grant a little under its parent's), so every claim's gate walks all D + 1 accounts, every
 * one of them limited, and every charge checks D + 1 limits; in the off arm no agent has one
 * (the ledger still keeps every account and rolls every charge up the chain: that is not the
 * budgets' cost, it is the figures every agent view shows).
 *
 * The measured operation is one whole one-step turn of a leaf: a followup message from its
 * parent (with the parent's token), a claim of its step (`POST /v1/agents/{id}/steps/next`),
 * and the step's output with usage (tokens and cost), which ends the turn. Budgets act at two
 * points of it, the gate in the claim (with the step charge its step-start makes) and the
 * token and cost charge of the output, so the turn holds all of their work; the claim alone
 * cannot be timed apart on the server's CPU clock while the turn's other requests run beside
 * it. The figures are the server's CPU time per turn (all threads, from /proc) and its main
 * thread's, and the difference on − off in µs per turn, which is what budgets add without
 * the rest of the turn diluting it.
 *
 * Two choices keep the rest of the turn the same from turn to turn and from arm to arm:
 *
 * - No cold resumes. A continuable child with nothing to do and no live children settles, and
 *   the next message to it cold-resumes it (reads its session back, a new incarnation): a cost
 *   of its own, not the claim's. So each leaf starts a child of its own (a keeper at depth
 *   D + 1 that never runs) and every agent of the chain ended its first turn: each stays live
 *   and idle between turns. A turn answered with `resumed` (a cold resume) fails the run.
 * - Delta claims. After its first, each claim carries `since: <the leaf's previous step>`, so
 *   the step holds only the messages new since then and its cost does not grow as the leaf's
 *   session grows by two messages a turn (bench/step-context.ts). Claims answered in full
 *   instead are counted (`fullFallbacks`).
 *
 * The cases run on one server, warmed up first (a turn on every leaf, then one round of each
 * case), then in each of `rounds` rounds every case takes `turns` turns (spread over its
 * drivers) in an order that rotates from round to round (with rounds a multiple of the number
 * of cases, 4 by default, every case runs in every place equally often). Every case takes the
 * same number of turns, so the leaves' sessions grow alike in both arms. A case's cost is its
 * CPU summed over its rounds over its turns; the spread is the on / off ratio of each round
 * (the arms of one depth in the same round). After the rounds, each root's subtree usage is
 * read back and checked: its steps are the turns taken, and its budget is set in the on arm
 * only. SQLite runs with synchronous NORMAL, as the other scaling cases do.
 *
 * Run by `npm run bench` (results.json, `budgetClaims`), or alone:
 *
 *   npx tsx bench/budget-claims.ts [--stores memory,sqlite] [--depths 1,50] [--agents 4] [--rounds 8] [--turns 400]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildServer, call, startServer, type Server } from './lib.js';

export type Store = 'memory' | 'sqlite';
type Arm = 'off' | 'on';

export interface BudgetClaimOptions {
  /** A directory for the SQLite file. */
  dir: string;
  /** Start a server on `data` (':memory:' or a SQLite file) with `env` added. */
  start(data: string, env: Record<string, string>): Promise<Server>;
  stores?: Store[];
  /** Depths of the measured agents, a root being 0; the first is the baseline depth. */
  depths?: number[];
  /** Drivers per case, each with its own leaf. */
  agents?: number;
  rounds?: number;
  /** Turns per case per round, spread over its drivers. */
  turns?: number;
}

/** One store's figures, keyed by depth, then arm. */
export interface BudgetClaimStore {
  /** Server CPU time per turn over all rounds, in µs; null off Linux. */
  cpuUsPerTurn: Record<string, Record<Arm, number | null>>;
  /** The main thread's (the event loop's), in µs; null off Linux. */
  mainThreadUsPerTurn: Record<string, Record<Arm, number | null>>;
  /** Server CPU per turn of each round, in µs. */
  cpuUsRounds: Record<string, Record<Arm, number[]>>;
  /** Server CPU per turn, budgets on over off (throughput, off over on, off Linux). */
  onOverOff: Record<string, number>;
  /** The same, round by round: the spread. */
  onOverOffRounds: Record<string, number[]>;
  /** The main thread's on over off. */
  mainThreadOnOverOff: Record<string, number | null>;
  /** What budgets add to a turn: server CPU per turn, on − off, in µs. */
  onMinusOffUs: Record<string, number | null>;
  /** The median round's turns per second. */
  turnsPerSecond: Record<string, Record<Arm, number>>;
  /** Measured turns per case. */
  turns: number;
  /** Measured claims with `since` answered in full rather than in delta form, per case. */
  fullFallbacks: Record<string, Record<Arm, number>>;
}

export interface BudgetClaimResult {
  setup: { depths: number[]; agents: number; rounds: number; turns: number; budget: Record<string, number>; usage: Record<string, number> };
  stores: Partial<Record<Store, BudgetClaimStore>>;
}

interface Agent {
  id: string;
  token: string;
}

interface Leaf extends Agent {
  previousStep?: string;
}

interface Case {
  depth: number;
  arm: Arm;
  root: Agent;
  /** The leaves' parent (the root at depth 1). */
  parent: Agent;
  leaves: Leaf[];
  /** Turns every leaf took, warm-up and first turns included. */
  turnsTaken: number;
  rounds: { turns: number; seconds: number; cpu: number | undefined; main: number | undefined; fallbacks: number }[];
}

/** The root's budget in the on arm: far beyond anything a run spends. */
const BUDGET = { tokens: 1e15, steps: 1e12, costMicroUsd: 1e15 };
/** Each agent's grant is this much less per level than the root's, so no grant exceeds what is left above it. */
const STEP_DOWN = 1_000_000;
/** The usage every output posts. */
const USAGE = { promptTokens: 60, completionTokens: 40, totalTokens: 100, costMicroUsd: 3 };

const grantAt = (depth: number): Record<string, number> => Object.fromEntries(Object.entries(BUDGET).map(([k, v]) => [k, v - depth * STEP_DOWN]));

async function newChild(url: string, parent: Agent, budget: Record<string, number> | undefined): Promise<Agent> {
  const r = await call<{ agent: { id: string }; agentToken: string }>(
    `${url}/v1/agents/${parent.id}/children`,
    'POST',
    { mode: 'continuable', prompt: 'work', ...(budget === undefined ? {} : { budget }) },
    { 'x-agent-token': parent.token },
  );
  return { id: r.agent.id, token: r.agentToken };
}

/** Claim an agent's open step (in delta form once it has a previous one) and answer it with usage: its turn ends. */
async function claimAndAnswer(url: string, agent: Leaf): Promise<{ fallback: boolean }> {
  const token = { 'x-agent-token': agent.token };
  const since = agent.previousStep;
  const { step } = await call<{ step: { id: string; messagesSince?: unknown } }>(
    `${url}/v1/agents/${agent.id}/steps/next`,
    'POST',
    since === undefined ? { waitMs: 1000 } : { waitMs: 1000, since },
    token,
  );
  const { turn } = await call<{ turn: string }>(`${url}/v1/agents/${agent.id}/steps/${step.id}/output`, 'POST', { content: 'done', usage: USAGE }, token);
  if (turn !== 'ended') throw new Error(`the turn of ${agent.id} did not end`);
  agent.previousStep = step.id;
  return { fallback: since !== undefined && step.messagesSince === undefined };
}

/** One measured turn: a followup from the leaf's parent, then the claim and the output. */
async function turn(url: string, parent: Agent, leaf: Leaf): Promise<{ fallback: boolean }> {
  const sent = await call<{ resumed?: unknown }>(`${url}/v1/agents/${leaf.id}/messages`, 'POST', { content: 'go', delivery: 'followup' }, { 'x-agent-token': parent.token });
  if (sent.resumed !== undefined) throw new Error(`leaf ${leaf.id} had settled and was cold-resumed: the turn would include a resume`);
  return claimAndAnswer(url, leaf);
}

/**
 * A forest for one case: root, chain to depth - 1, `agents` leaves at `depth` each with a
 * keeper child, every agent but the keepers with a budget in the on arm; every first turn
 * but the keepers' ended, so all of them wait, live and idle.
 */
async function forest(url: string, depth: number, arm: Arm, agents: number): Promise<Case> {
  const budgetAt = (d: number): Record<string, number> | undefined => (arm === 'on' ? grantAt(d) : undefined);
  const created = await call<{ agent: { id: string }; agentToken: string }>(`${url}/v1/agents`, 'POST', arm === 'on' ? { budget: BUDGET } : {});
  const root: Agent = { id: created.agent.id, token: created.agentToken };
  const chain: Agent[] = [];
  let parent = root;
  for (let d = 1; d < depth; d++) chain.push((parent = await newChild(url, parent, budgetAt(d))));
  const leaves: Leaf[] = [];
  for (let i = 0; i < agents; i++) {
    const leaf = await newChild(url, parent, budgetAt(depth));
    await newChild(url, leaf, undefined);
    leaves.push(leaf);
  }
  // Each leaf's first turn leaves it a previous step: its first measured claim is delta too.
  for (const agent of [...chain, ...leaves]) await claimAndAnswer(url, agent);
  return { depth, arm, root, parent, leaves, turnsTaken: 1, rounds: [] };
}

async function storeCases(s: Server, depths: number[], agents: number, rounds: number, turns: number): Promise<BudgetClaimStore> {
  const cases: Case[] = [];
  for (const depth of depths) for (const arm of ['off', 'on'] as const) cases.push(await forest(s.url, depth, arm, agents));
  const perLeaf = Math.ceil(turns / agents);
  const run = async (c: Case): Promise<{ turns: number; fallbacks: number }> => {
    let fallbacks = 0;
    await Promise.all(c.leaves.map(async (leaf) => {
      for (let n = 0; n < perLeaf; n++) if ((await turn(s.url, c.parent, leaf)).fallback) fallbacks++;
    }));
    c.turnsTaken += perLeaf;
    return { turns: perLeaf * c.leaves.length, fallbacks };
  };
  // Warm-up: one round of each case, unmeasured.
  for (const c of cases) await run(c);
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < cases.length; k++) {
      const c = cases[(r + k) % cases.length]!;
      const before = [s.cpuSeconds(), s.mainThreadCpuSeconds()];
      const began = performance.now();
      const done = await run(c);
      const seconds = (performance.now() - began) / 1000;
      const after = [s.cpuSeconds(), s.mainThreadCpuSeconds()];
      const delta = (i: number): number | undefined => (before[i] === undefined || after[i] === undefined ? undefined : after[i]! - before[i]!);
      c.rounds.push({ turns: done.turns, seconds, cpu: delta(0), main: delta(1), fallbacks: done.fallbacks });
    }
  }
  // Every turn was charged up the whole chain, and only the on arm has budgets.
  for (const c of cases) {
    const { items } = await call<{ items: { usage: { subtree: { steps: number; totalTokens: number } }; budget: unknown }[] }>(`${s.url}/v1/agents/${c.root.id}/usage`, 'GET');
    const steps = c.depth - 1 + c.leaves.length * c.turnsTaken;
    const subtree = items[0]!.usage.subtree;
    if (subtree.steps !== steps || subtree.totalTokens !== steps * USAGE.totalTokens) {
      throw new Error(`depth ${c.depth} ${c.arm}: the root's subtree shows ${subtree.steps} steps and ${subtree.totalTokens} tokens, not ${steps} and ${steps * USAGE.totalTokens}`);
    }
    if ((items[0]!.budget !== null) !== (c.arm === 'on')) throw new Error(`depth ${c.depth} ${c.arm}: the root's budget is ${JSON.stringify(items[0]!.budget)}`);
  }
  const find = (depth: number, arm: Arm): Case => cases.find((c) => c.depth === depth && c.arm === arm)!;
  const sum = (c: Case, f: (x: Case['rounds'][number]) => number): number => c.rounds.reduce((a, x) => a + f(x), 0);
  const known = (c: Case, key: 'cpu' | 'main'): boolean => c.rounds.every((x) => x[key] !== undefined);
  const us = (c: Case, key: 'cpu' | 'main'): number | null => (known(c, key) ? +((sum(c, (x) => x[key]!) / sum(c, (x) => x.turns)) * 1e6).toFixed(1) : null);
  const rate = (c: Case): number => {
    const sorted = c.rounds.map((x) => x.turns / x.seconds).sort((a, b) => a - b);
    return Math.round(sorted[Math.floor(sorted.length / 2)]!);
  };
  const ratio = (a: number, b: number): number => +(a / b).toFixed(3);
  const byDepth = <T>(f: (off: Case, on: Case) => T): Record<string, T> => Object.fromEntries(depths.map((d) => [String(d), f(find(d, 'off'), find(d, 'on'))]));
  const arms = <T>(f: (c: Case) => T): Record<string, Record<Arm, T>> => byDepth((off, on) => ({ off: f(off), on: f(on) }));
  return {
    cpuUsPerTurn: arms((c) => us(c, 'cpu')),
    mainThreadUsPerTurn: arms((c) => us(c, 'main')),
    cpuUsRounds: arms((c) => (known(c, 'cpu') ? c.rounds.map((x) => +((x.cpu! / x.turns) * 1e6).toFixed(1)) : [])),
    onOverOff: byDepth((off, on) => {
      const [a, b] = [us(on, 'cpu'), us(off, 'cpu')];
      return a !== null && b !== null ? ratio(a, b) : ratio(rate(off), rate(on));
    }),
    onOverOffRounds: byDepth((off, on) => (known(off, 'cpu') && known(on, 'cpu') ? on.rounds.map((x, i) => ratio(x.cpu! / x.turns, off.rounds[i]!.cpu! / off.rounds[i]!.turns)) : [])),
    mainThreadOnOverOff: byDepth((off, on) => {
      const [a, b] = [us(on, 'main'), us(off, 'main')];
      return a !== null && b !== null ? ratio(a, b) : null;
    }),
    onMinusOffUs: byDepth((off, on) => {
      const [a, b] = [us(on, 'cpu'), us(off, 'cpu')];
      return a !== null && b !== null ? +(a - b).toFixed(1) : null;
    }),
    turnsPerSecond: arms(rate),
    turns: perLeaf * agents * rounds,
    fullFallbacks: arms((c) => sum(c, (x) => x.fallbacks)),
  };
}

export async function budgetClaimCases(options: BudgetClaimOptions): Promise<BudgetClaimResult> {
  const stores = options.stores ?? ['memory', 'sqlite'];
  const depths = options.depths ?? [1, 50];
  const agents = options.agents ?? 4;
  const rounds = options.rounds ?? 8;
  const turns = options.turns ?? 400;
  // The keepers sit one level below the deepest leaves.
  const env = { AGENTFOREST_MAX_DEPTH: String(Math.max(64, Math.max(...depths) + 1)) };
  const result: BudgetClaimResult = { setup: { depths, agents, rounds, turns: Math.ceil(turns / agents) * agents, budget: BUDGET, usage: USAGE }, stores: {} };
  for (const store of stores) {
    const s = await options.start(store === 'memory' ? ':memory:' : join(options.dir, 'budget-claims.db'), env);
    try {
      result.stores[store] = await storeCases(s, depths, agents, rounds, turns);
    } finally {
      await s.stop();
    }
  }
  return result;
}

/** Table rows: one per store, depth and arm. */
export function budgetClaimRows(result: BudgetClaimResult): Record<string, unknown>[] {
  const rows: Record<string, unknown>[] = [];
  for (const [store, s] of Object.entries(result.stores)) {
    for (const depth of result.setup.depths.map(String)) {
      for (const arm of ['off', 'on'] as const) {
        rows.push({
          scenario: `one-step turn at depth ${depth}, budgets ${arm}, ${store}`,
          rps: s.turnsPerSecond[depth]![arm],
          cpuUs: s.cpuUsPerTurn[depth]![arm],
          mainThreadUs: s.mainThreadUsPerTurn[depth]![arm],
          ...(arm === 'on' ? { onOverOff: s.onOverOff[depth], mainThreadOnOverOff: s.mainThreadOnOverOff[depth], onMinusOffUs: s.onMinusOffUs[depth] } : {}),
        });
      }
    }
  }
  return rows;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const arg = (name: string, fallback: number): number => {
    const i = process.argv.indexOf(`--${name}`);
    const value = i === -1 ? fallback : Number(process.argv[i + 1]);
    if (!(Number.isInteger(value) && value > 0)) throw new Error(`--${name} must be a positive whole number`);
    return value;
  };
  const list = (name: string): string[] | undefined => {
    const i = process.argv.indexOf(`--${name}`);
    return i === -1 ? undefined : (process.argv[i + 1] ?? '').split(',');
  };
  const depths = list('depths')?.map(Number);
  if (depths !== undefined && !depths.every((d, k) => Number.isInteger(d) && d > 0 && (k === 0 || d > depths[k - 1]!))) {
    throw new Error('--depths must be whole numbers above 0, shallowest first (1,50)');
  }
  const stores = list('stores');
  if (stores !== undefined && !stores.every((x) => x === 'memory' || x === 'sqlite')) throw new Error('--stores must name memory, sqlite or both');
  const dir = mkdtempSync(join(tmpdir(), 'agentforest-budget-claims-'));
  try {
    buildServer();
    const began = performance.now();
    const result = await budgetClaimCases({
      dir,
      start: (data, env) => startServer(data, { AGENTFOREST_SQLITE_SYNCHRONOUS: 'normal', ...env }),
      ...(stores === undefined ? {} : { stores: stores as Store[] }),
      ...(depths === undefined ? {} : { depths }),
      agents: arg('agents', 4),
      rounds: arg('rounds', 8),
      turns: arg('turns', 400),
    });
    console.table(budgetClaimRows(result));
    console.log(JSON.stringify(result, null, 2));
    console.log(`measured in ${((performance.now() - began) / 1000).toFixed(1)} s (build not included)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
