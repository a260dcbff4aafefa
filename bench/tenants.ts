/**
 * What tenants cost a claim and a report: server CPU per operation with a tenant's key (its
 * quotas set) against today's operator key, as ratios measured in one run on one server per
 * store (the memory store and durable SQLite). Target: tenant / operator ≤ 1.1 for both.
 *
 * Each server runs as `npm start` runs it, with AGENTFOREST_API_KEYS set to one admin key, so
 * every request of the run carries `Authorization: Bearer <key>`. Two arms share the server:
 *
 * - operator: every request with the admin key, as a deployment without tenants makes them;
 * - tenant: a tenant made with the admin key (`POST /v1/tenants`, every quota set, each far
 *   above what the run spends), a key of it (`POST /v1/tenants/{id}/keys`), and every request
 *   of the arm with that key. Its roots, and so their children, belong to the tenant: every
 *   request naming one of its agents passes the tenant check (the key's digest looked up, the
 *   agent's owner compared), every claim passes the quota gate (three time quotas read), and
 *   every step, token and cost is counted in the tenant's usage windows.
 *
 * Two measured operations, each in both arms:
 *
 * - claim: one whole one-step turn of a root, as bench/budget-claims.ts times it: a followup
 *   message (`POST /v1/agents/{id}/messages`), a delta claim of its step (`POST …/steps/next`
 *   with the root's token and `since` its previous step), and the step's output with usage,
 *   which ends the turn. The quota gate sits in the claim and the usage counting in the
 *   claim's step start and the output, so the turn holds all of it; claims answered in full
 *   rather than in delta form are counted (`fullFallbacks`). Each root ran one turn before the
 *   rounds, so it is live and idle between turns and its first measured claim is delta too.
 * - report: a live continuable child's `report` tool call (`POST /v1/agents/{childId}/tool-calls`
 *   with the child's token), each child under a root of its own that never runs a turn, so
 *   every quiet report is appended at once to an idle parent. The child never takes a step: it
 *   stays live, with its first turn open, for the whole run, its calls staged in its own inbox
 *   (unbounded here, as in bench/report-ack.ts).
 *
 * Each arm has `agents` roots of each kind, driven in parallel, one driver per root. The cases
 * (operation × arm) run on one server, warmed up by one unmeasured round of each, then in each
 * of `rounds` rounds every case runs once (`turns` turns, or `reports` reports, spread over its
 * drivers), the two arms of an operation back to back, in an order that rotates from round to
 * round: which arm goes first alternates every round, which operation every other round (with
 * rounds a multiple of 4, every case runs in every place equally often). A case's cost is its
 * server CPU (all threads, from /proc) summed over its rounds over its operations; the spread
 * is the tenant / operator ratio of each round. After the rounds the run checks
 * that the tenant's agents carry its id and the operator's none, that every root's steps are
 * the turns it took, and that the tenant's view counts its live agents and roots and the
 * tokens its turns spent. SQLite runs with its default, synchronous FULL.
 *
 * Writes bench/tenants.json (`--out` elsewhere).
 *
 *   npx tsx bench/tenants.ts [--stores memory,sqlite] [--rounds 8] [--turns 400] [--reports 2000] [--agents 4] [--out path]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildServer, call, median, root as repoRoot, startServer, type Server } from './lib.js';

export type Store = 'memory' | 'sqlite';
type Arm = 'operator' | 'tenant';
type Operation = 'claimTurn' | 'report';

const ARMS: readonly Arm[] = ['operator', 'tenant'];
const OPERATIONS: readonly Operation[] = ['claimTurn', 'report'];

export interface TenantBenchOptions {
  /** A directory for the SQLite file. */
  dir: string;
  /** Start a server on `data` (':memory:' or a SQLite file) with `env` added. */
  start(data: string, env: Record<string, string>): Promise<Server>;
  stores?: Store[];
  /** Drivers per case, each with roots of its own. */
  agents?: number;
  rounds?: number;
  /** Claim turns per arm per round, spread over its drivers. */
  turns?: number;
  /** Reports per arm per round, spread over its drivers. */
  reports?: number;
}

/** One store's figures, keyed by operation, then arm. */
export interface TenantStore {
  /** Server CPU time per operation over all rounds, in µs; null off Linux. */
  cpuUsPerOp: Record<Operation, Record<Arm, number | null>>;
  /** The main thread's (the event loop's), in µs; null off Linux. */
  mainThreadUsPerOp: Record<Operation, Record<Arm, number | null>>;
  /** Server CPU per operation of each round, in µs. */
  cpuUsRounds: Record<Operation, Record<Arm, number[]>>;
  /** Server CPU per operation, tenant over operator (throughput, operator over tenant, off Linux). */
  tenantOverOperator: Record<Operation, number>;
  /** The same, round by round. */
  tenantOverOperatorRounds: Record<Operation, number[]>;
  /** The lowest, median and highest of those (the median is the sturdier figure on a busy machine). */
  roundSpread: Record<Operation, { min: number; median: number; max: number } | null>;
  /** The main thread's tenant over operator. */
  mainThreadTenantOverOperator: Record<Operation, number | null>;
  /** What the tenant adds to an operation: server CPU per operation, tenant − operator, in µs. */
  tenantMinusOperatorUs: Record<Operation, number | null>;
  /** The median round's operations per second. */
  opsPerSecond: Record<Operation, Record<Arm, number>>;
  /** Measured operations per case. */
  measured: Record<Operation, number>;
  /** Measured claims with `since` answered in full rather than in delta form, per arm. */
  fullFallbacks: Record<Arm, number>;
}

export interface TenantBenchResult {
  at: string;
  setup: {
    agents: number;
    rounds: number;
    turns: number;
    reports: number;
    tenant: string;
    quotas: Record<string, number>;
    usage: Record<string, number>;
    sqliteSynchronous: string;
  };
  target: number;
  stores: Partial<Record<Store, TenantStore>>;
}

interface Agent {
  id: string;
  token: string;
}

interface Root extends Agent {
  previousStep?: string;
  /** Turns taken (a root) or reports sent (a reporting child), warm-up and first turns included. */
  done: number;
}

interface Case {
  operation: Operation;
  arm: Arm;
  /** The arm's key, on every request. */
  auth: Record<string, string>;
  /** claimTurn: the turning roots; report: the reporting children. */
  agents: Root[];
  rounds: { ops: number; seconds: number; cpu: number | undefined; main: number | undefined; fallbacks: number }[];
}

/** The admin key of AGENTFOREST_API_KEYS: the operator's. */
const ADMIN_KEY = 'bench-admin-key';
const TENANT = 'bench-tenant';
/** Every quota the tenant can have, far beyond anything a run spends. */
const QUOTAS = { maxLiveAgents: 1e9, maxRoots: 1e9, stepsPerMinute: 1e9, tokensPerDay: 1e9, costMicroUsdPerDay: 1e9 };
/** The usage every output posts. */
const USAGE = { promptTokens: 60, completionTokens: 40, totalTokens: 100, costMicroUsd: 3 };
const REPORT = { name: 'report', input: { output: 'a finding worth reporting' } };

const bearer = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });

async function newRoot(url: string, auth: Record<string, string>): Promise<Root> {
  const r = await call<{ agent: { id: string }; agentToken: string }>(`${url}/v1/agents`, 'POST', {}, auth);
  return { id: r.agent.id, token: r.agentToken, done: 0 };
}

/** A continuable child of a root of its own; it never takes a step, so it stays live with its first turn open. */
async function reporter(url: string, auth: Record<string, string>): Promise<Root> {
  const parent = await newRoot(url, auth);
  const r = await call<{ agent: { id: string }; agentToken: string }>(
    `${url}/v1/agents/${parent.id}/children`,
    'POST',
    { mode: 'continuable', prompt: 'report findings' },
    { ...auth, 'x-agent-token': parent.token },
  );
  return { id: r.agent.id, token: r.agentToken, done: 0 };
}

/** One turn of a root: a followup, the claim of its step (delta once it has a previous one), the output with usage. */
async function turn(url: string, auth: Record<string, string>, agent: Root): Promise<{ fallback: boolean }> {
  const sent = await call<{ resumed?: unknown }>(`${url}/v1/agents/${agent.id}/messages`, 'POST', { content: 'go', delivery: 'followup' }, auth);
  if (sent.resumed !== undefined) throw new Error(`root ${agent.id} was resumed: the turn would include a resume`);
  const token = { ...auth, 'x-agent-token': agent.token };
  const since = agent.previousStep;
  const { step } = await call<{ step: { id: string; messagesSince?: unknown } }>(
    `${url}/v1/agents/${agent.id}/steps/next`,
    'POST',
    since === undefined ? { waitMs: 1000 } : { waitMs: 1000, since },
    token,
  );
  const { turn: ended } = await call<{ turn: string }>(`${url}/v1/agents/${agent.id}/steps/${step.id}/output`, 'POST', { content: 'done', usage: USAGE }, token);
  if (ended !== 'ended') throw new Error(`the turn of ${agent.id} did not end`);
  agent.previousStep = step.id;
  agent.done += 1;
  return { fallback: since !== undefined && step.messagesSince === undefined };
}

async function report(url: string, auth: Record<string, string>, child: Root): Promise<void> {
  const r = await call<{ isError?: boolean; content?: unknown }>(`${url}/v1/agents/${child.id}/tool-calls`, 'POST', REPORT, { ...auth, 'x-agent-token': child.token });
  if (r.isError === true) throw new Error(`the report of ${child.id} failed: ${JSON.stringify(r.content)}`);
  child.done += 1;
}

async function storeCases(s: Server, agents: number, rounds: number, turns: number, reports: number): Promise<TenantStore> {
  const admin = bearer(ADMIN_KEY);
  await call(`${s.url}/v1/tenants`, 'POST', { id: TENANT, quotas: QUOTAS }, admin);
  const { key } = await call<{ key: string }>(`${s.url}/v1/tenants/${TENANT}/keys`, 'POST', undefined, admin);
  const auths: Record<Arm, Record<string, string>> = { operator: admin, tenant: bearer(key) };

  const cases: Case[] = [];
  for (const operation of OPERATIONS) {
    for (const arm of ARMS) {
      const auth = auths[arm];
      const made: Root[] = [];
      for (let i = 0; i < agents; i++) made.push(operation === 'claimTurn' ? await newRoot(s.url, auth) : await reporter(s.url, auth));
      // Each root's first turn leaves it a previous step: its first measured claim is delta too.
      if (operation === 'claimTurn') for (const r of made) await turn(s.url, auth, r);
      cases.push({ operation, arm, auth, agents: made, rounds: [] });
    }
  }
  const find = (operation: Operation, arm: Arm): Case => cases.find((c) => c.operation === operation && c.arm === arm)!;
  const perAgent = { claimTurn: Math.ceil(turns / agents), report: Math.ceil(reports / agents) };
  const run = async (c: Case): Promise<{ ops: number; fallbacks: number }> => {
    let fallbacks = 0;
    const n = perAgent[c.operation];
    await Promise.all(c.agents.map(async (agent) => {
      for (let k = 0; k < n; k++) {
        if (c.operation === 'report') await report(s.url, c.auth, agent);
        else if ((await turn(s.url, c.auth, agent)).fallback) fallbacks++;
      }
    }));
    return { ops: n * c.agents.length, fallbacks };
  };
  // Warm-up: one round of each case, unmeasured.
  for (const c of cases) await run(c);
  for (let r = 0; r < rounds; r++) {
    // The two arms of an operation run back to back, so they see the same machine; which arm
    // goes first alternates every round, which operation goes first every other round.
    const armOrder = r % 2 === 0 ? ARMS : [...ARMS].reverse();
    const opOrder = Math.floor(r / 2) % 2 === 0 ? OPERATIONS : [...OPERATIONS].reverse();
    for (const c of opOrder.flatMap((o) => armOrder.map((a) => find(o, a)))) {
      const before = [s.cpuSeconds(), s.mainThreadCpuSeconds()];
      const began = performance.now();
      const done = await run(c);
      const seconds = (performance.now() - began) / 1000;
      const after = [s.cpuSeconds(), s.mainThreadCpuSeconds()];
      const delta = (i: number): number | undefined => (before[i] === undefined || after[i] === undefined ? undefined : after[i]! - before[i]!);
      c.rounds.push({ ops: done.ops, seconds, cpu: delta(0), main: delta(1), fallbacks: done.fallbacks });
    }
  }
  await check(s.url, cases, auths);

  const sum = (c: Case, f: (x: Case['rounds'][number]) => number): number => c.rounds.reduce((a, x) => a + f(x), 0);
  const known = (c: Case, key: 'cpu' | 'main'): boolean => c.rounds.every((x) => x[key] !== undefined);
  const us = (c: Case, key: 'cpu' | 'main'): number | null => (known(c, key) ? +((sum(c, (x) => x[key]!) / sum(c, (x) => x.ops)) * 1e6).toFixed(1) : null);
  const rate = (c: Case): number => {
    const sorted = c.rounds.map((x) => x.ops / x.seconds).sort((a, b) => a - b);
    return Math.round(sorted[Math.floor(sorted.length / 2)]!);
  };
  const ratio = (a: number, b: number): number => +(a / b).toFixed(3);
  const byOp = <T>(f: (operator: Case, tenant: Case) => T): Record<Operation, T> =>
    Object.fromEntries(OPERATIONS.map((o) => [o, f(find(o, 'operator'), find(o, 'tenant'))])) as Record<Operation, T>;
  const arms = <T>(f: (c: Case) => T): Record<Operation, Record<Arm, T>> => byOp((operator, tenant) => ({ operator: f(operator), tenant: f(tenant) }));
  const roundRatios = byOp((operator, tenant) =>
    known(operator, 'cpu') && known(tenant, 'cpu') ? tenant.rounds.map((x, i) => ratio(x.cpu! / x.ops, operator.rounds[i]!.cpu! / operator.rounds[i]!.ops)) : [],
  );
  return {
    cpuUsPerOp: arms((c) => us(c, 'cpu')),
    mainThreadUsPerOp: arms((c) => us(c, 'main')),
    cpuUsRounds: arms((c) => (known(c, 'cpu') ? c.rounds.map((x) => +((x.cpu! / x.ops) * 1e6).toFixed(1)) : [])),
    tenantOverOperator: byOp((operator, tenant) => {
      const [a, b] = [us(tenant, 'cpu'), us(operator, 'cpu')];
      return a !== null && b !== null ? ratio(a, b) : ratio(rate(operator), rate(tenant));
    }),
    tenantOverOperatorRounds: roundRatios,
    roundSpread: Object.fromEntries(
      OPERATIONS.map((o) => [o, roundRatios[o].length === 0 ? null : { min: Math.min(...roundRatios[o]), median: median(roundRatios[o]), max: Math.max(...roundRatios[o]) }]),
    ) as TenantStore['roundSpread'],
    mainThreadTenantOverOperator: byOp((operator, tenant) => {
      const [a, b] = [us(tenant, 'main'), us(operator, 'main')];
      return a !== null && b !== null ? ratio(a, b) : null;
    }),
    tenantMinusOperatorUs: byOp((operator, tenant) => {
      const [a, b] = [us(tenant, 'cpu'), us(operator, 'cpu')];
      return a !== null && b !== null ? +(a - b).toFixed(1) : null;
    }),
    opsPerSecond: arms(rate),
    measured: { claimTurn: perAgent.claimTurn * agents * rounds, report: perAgent.report * agents * rounds },
    fullFallbacks: { operator: sum(find('claimTurn', 'operator'), (x) => x.fallbacks), tenant: sum(find('claimTurn', 'tenant'), (x) => x.fallbacks) },
  };
}

/**
 * The arms were what they claim to be: the tenant's agents carry its id and the operator's
 * none, every turning root's steps are the turns it took, and the tenant's view counts its
 * live agents and roots and the tokens and cost its turns spent today.
 */
async function check(url: string, cases: Case[], auths: Record<Arm, Record<string, string>>): Promise<void> {
  for (const c of cases) {
    for (const agent of c.agents) {
      const view = await call<{ tenantId?: string }>(`${url}/v1/agents/${agent.id}`, 'GET', undefined, c.auth);
      if (view.tenantId !== (c.arm === 'tenant' ? TENANT : undefined)) throw new Error(`${c.operation} ${c.arm}: agent ${agent.id} has tenantId ${view.tenantId}`);
      if (c.operation !== 'claimTurn') continue;
      const { items } = await call<{ items: { usage: { self: { steps: number } } }[] }>(`${url}/v1/agents/${agent.id}/usage`, 'GET', undefined, c.auth);
      if (items[0]!.usage.self.steps !== agent.done) throw new Error(`${c.arm}: root ${agent.id} shows ${items[0]!.usage.self.steps} steps, not the ${agent.done} turns it took`);
    }
  }
  const tenantCases = cases.filter((c) => c.arm === 'tenant');
  const roots = tenantCases.reduce((n, c) => n + c.agents.length, 0);
  // Each reporter is a child under a root of its own.
  const live = roots + tenantCases.filter((c) => c.operation === 'report').reduce((n, c) => n + c.agents.length, 0);
  const turnsTaken = tenantCases.filter((c) => c.operation === 'claimTurn').flatMap((c) => c.agents).reduce((n, a) => n + a.done, 0);
  const { usage } = await call<{ usage: { liveAgents: number; liveRoots: number; tokens: number; costMicroUsd: number } }>(`${url}/v1/tenants/${TENANT}`, 'GET', undefined, auths.operator);
  if (usage.liveRoots !== roots || usage.liveAgents !== live) throw new Error(`the tenant's view shows ${usage.liveRoots} roots and ${usage.liveAgents} agents live, not ${roots} and ${live}`);
  // A UTC day that turned during the run leaves less in today's window.
  const sameDay = usage.tokens === turnsTaken * USAGE.totalTokens && usage.costMicroUsd === turnsTaken * USAGE.costMicroUsd;
  if (!sameDay && new Date().getUTCHours() !== 0) throw new Error(`the tenant's view shows ${usage.tokens} tokens and ${usage.costMicroUsd} µUSD today, not ${turnsTaken * USAGE.totalTokens} and ${turnsTaken * USAGE.costMicroUsd}`);
}

export async function tenantCases(options: TenantBenchOptions): Promise<TenantBenchResult> {
  const stores = options.stores ?? ['memory', 'sqlite'];
  const agents = options.agents ?? 4;
  const rounds = options.rounds ?? 8;
  const turns = options.turns ?? 400;
  const reports = options.reports ?? 2000;
  const result: TenantBenchResult = {
    at: new Date().toISOString(),
    setup: {
      agents,
      rounds,
      turns: Math.ceil(turns / agents) * agents,
      reports: Math.ceil(reports / agents) * agents,
      tenant: TENANT,
      quotas: QUOTAS,
      usage: USAGE,
      sqliteSynchronous: 'full',
    },
    target: 1.1,
    stores: {},
  };
  // The operator's key is an admin key, as every key of a deployment without tenants now is.
  // A reporting child never takes a step, so its calls stay staged in its own inbox: no bound
  // on it here (as in bench/report-ack.ts).
  const env = { AGENTFOREST_API_KEYS: ADMIN_KEY, AGENTFOREST_MAX_INBOX: String(2 ** 31) };
  for (const store of stores) {
    const s = await options.start(store === 'memory' ? ':memory:' : join(options.dir, 'tenants.db'), env);
    try {
      result.stores[store] = await storeCases(s, agents, rounds, turns, reports);
    } finally {
      await s.stop();
    }
  }
  return result;
}

/** Table rows: one per store, operation and arm. */
export function tenantRows(result: TenantBenchResult): Record<string, unknown>[] {
  const rows: Record<string, unknown>[] = [];
  for (const [store, s] of Object.entries(result.stores)) {
    for (const operation of OPERATIONS) {
      for (const arm of ARMS) {
        rows.push({
          scenario: `${operation === 'claimTurn' ? 'one-step turn of a root' : 'report of a child'}, ${arm} key, ${store}`,
          opsPerSecond: s.opsPerSecond[operation][arm],
          cpuUs: s.cpuUsPerOp[operation][arm],
          mainThreadUs: s.mainThreadUsPerOp[operation][arm],
          ...(arm === 'tenant'
            ? {
                tenantOverOperator: s.tenantOverOperator[operation],
                rounds: s.roundSpread[operation] === null ? null : `${s.roundSpread[operation].min}–${s.roundSpread[operation].max}`,
                medianRound: s.roundSpread[operation]?.median ?? null,
                tenantMinusOperatorUs: s.tenantMinusOperatorUs[operation],
              }
            : {}),
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
  const storesArg = process.argv.indexOf('--stores');
  const stores = storesArg === -1 ? undefined : (process.argv[storesArg + 1] ?? '').split(',');
  if (stores !== undefined && !stores.every((x) => x === 'memory' || x === 'sqlite')) throw new Error('--stores must name memory, sqlite or both');
  const outArg = process.argv.indexOf('--out');
  const out = resolve(outArg === -1 ? join(repoRoot, 'bench', 'tenants.json') : process.argv[outArg + 1]!);
  const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-tenants-'));
  try {
    buildServer();
    const began = performance.now();
    const result = await tenantCases({
      dir,
      start: (data, env) => startServer(data, env),
      ...(stores === undefined ? {} : { stores: stores as Store[] }),
      agents: arg('agents', 4),
      rounds: arg('rounds', 8),
      turns: arg('turns', 400),
      reports: arg('reports', 2000),
    });
    console.table(tenantRows(result));
    console.log(JSON.stringify(result, null, 2));
    writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    console.log(`measured in ${((performance.now() - began) / 1000).toFixed(1)} s (build not included); written to ${out}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
