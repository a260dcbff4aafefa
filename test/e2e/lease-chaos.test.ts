/**
 * Step leases end to end under chaos: one real server with a short step lease, roots with
 * queued followups, and a pool of worker processes (fixtures/lease-worker.ts) that claim any
 * step over HTTP, think for a moment and post the answer fenced with their attempt. Each worker
 * says which step it claimed and waits for the test's word to answer it; the test SIGKILLs some
 * instead (a seeded choice on each claim, a bounded number of kills) and a standby takes over
 * at once. What must hold: every turn completes; no step's output is recorded twice (one
 * assistant message per turn, from the attempt that held the step); every killed claim, and
 * nothing else, is claimed again as the next attempt (or an answer that came after its lease,
 * on a loaded machine, was refused); each turn a kill left open ends within the lease plus the
 * claim time after the kill; the lease counters agree with the logs.
 *
 * It prints what it measured (turns, kills, re-claims, recovery times) in one line. `npm test`
 * runs a fixed seed; `npm run test:chaos` runs four times the roots and kills on a random seed,
 * printed for replay (fixtures/chaos.ts). Where the kills land also depends on timing, so a
 * seed narrows a failure down rather than replaying it exactly.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import type { AgentView } from '../../src/contract/index.js';
import { chaosRuns, chaosSeed } from '../fixtures/chaos.js';
import { closeWithTest } from '../fixtures/cleanup.js';
import { leaseCountsIn } from '../fixtures/leases.js';
import type { WorkerLine } from '../fixtures/lease-worker.js';
import { Rng } from '../fixtures/races.js';
import { PROJECT_ROOT, ServerClient, startServer, type RunningServer } from '../fixtures/server-process.js';
import { until } from '../fixtures/until.js';
import type { Entry } from '../fixtures/wire.js';

const LEASE_MS = 600;
const ROOTS = chaosRuns(30, 120);
const TURNS_PER_ROOT = 2;
const WORKERS = 4;
/** Standby workers loaded ahead, to replace the killed ones at once. */
const SPARES = 3;
/** A kill with no standby ready leaves at least this many workers claiming. */
const MIN_WORKING = 2;
/** How long a worker thinks once let to answer. */
const THINK_MS = [20, 80] as const;
const MAX_KILLS = chaosRuns(8, 32);
const KILL_CHANCE = 0.3;
const SEED = chaosSeed('lease chaos', 0x1ea5e26);
/**
 * What a re-claim may take beyond the lease: the wait behind the steps queued before it, and the
 * answer's own think time. Four times the roots queue more steps ahead of a re-claim (up to
 * 4.3 s seen), hence the longer slack of the long run.
 */
const CLAIM_SLACK_MS = chaosRuns(3_000, 8_000);
const WORKER_START_MS = 15_000;
const RUN_TIMEOUT_MS = chaosRuns(25_000, 100_000);

interface Kill {
  agentId: string;
  stepId: string;
  attempt: number;
  at: number;
}

/**
 * Worker processes, watched line by line. Each starts as a standby (loaded, not claiming) and
 * is set to work with `go`; a kill sets a ready standby to work in its place (or the next one to
 * load) and starts another standby. A worker is killed only while a standby is ready or more
 * than MIN_WORKING others work. Each process is SIGKILLed when the test ends.
 */
class WorkerPool {
  readonly kills: Kill[] = [];
  /** Answers refused because the worker, alive but slow (a loaded machine), posted after its lease ran out. */
  readonly late: { stepId: string; attempt: number; status: number }[] = [];
  readonly stderr: string[] = [];
  endedTurns = 0;
  private readonly working = new Set<ChildProcess>();
  private readonly standby: ChildProcess[] = [];
  private readonly starting = new Set<ChildProcess>();
  /** Set once the test put the first workers to work: from then on a standby that loads fills a gap. */
  private started = false;

  constructor(
    private readonly server: RunningServer,
    private readonly rng: Rng,
  ) {}

  /** Standby workers loaded and ready to take over. */
  get ready(): number {
    return this.standby.length;
  }

  spawnStandby(): void {
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/lease-worker.ts'], {
      cwd: PROJECT_ROOT,
      env: {
        ...process.env,
        LEASE_WORKER_URL: this.server.url,
        LEASE_WORKER_SEED: String(this.rng.int(1, 2 ** 31)),
        LEASE_WORKER_MIN_MS: String(THINK_MS[0]),
        LEASE_WORKER_MAX_MS: String(THINK_MS[1]),
        LEASE_WORKER_STANDBY: '1',
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    this.starting.add(child);
    closeWithTest(async () => {
      child.stdin?.end();
      child.kill('SIGKILL');
      await exited;
    });
    createInterface({ input: child.stderr! }).on('line', (text) => this.stderr.push(text));
    createInterface({ input: child.stdout! }).on('line', (text) => this.onLine(child, JSON.parse(text) as WorkerLine));
  }

  /** Sets a ready standby to work; false when none is ready. */
  activate(): boolean {
    this.started = true;
    const child = this.standby.shift();
    if (child === undefined) return false;
    child.stdin?.write('go\n');
    this.working.add(child);
    return true;
  }

  stopAll(): void {
    for (const child of [...this.working, ...this.standby, ...this.starting]) child.kill('SIGKILL');
    this.working.clear();
    this.standby.length = 0;
    this.starting.clear();
  }

  private onLine(child: ChildProcess, line: WorkerLine): void {
    if (line.event === 'ready' && this.starting.delete(child)) {
      this.standby.push(child);
      if (this.working.size < WORKERS && this.started) this.activate();
    }
    if (line.event === 'posted' && line.status === 200 && line.turn === 'ended') this.endedTurns++;
    if (line.event === 'posted' && line.status !== 200) this.late.push({ stepId: line.stepId, attempt: line.attempt, status: line.status });
    if (line.event !== 'claimed' || !this.working.has(child)) return;
    // The worker holds this step and waits for `answer`: kill it now, or let it answer.
    const replaceable = this.standby.length > 0 || this.working.size > MIN_WORKING;
    if (this.kills.length >= MAX_KILLS || !replaceable || !this.rng.chance(KILL_CHANCE)) {
      child.stdin?.write('answer\n');
      return;
    }
    child.kill('SIGKILL');
    this.working.delete(child);
    this.kills.push({ agentId: line.agentId, stepId: line.stepId, attempt: line.attempt, at: Date.now() });
    this.activate();
    this.spawnStandby();
  }
}

interface TurnRecord {
  rootId: string;
  turnId: string;
  starts: Entry[];
  assistants: Entry[];
  end: Entry | undefined;
}

function turnsOf(rootId: string, entries: readonly Entry[]): TurnRecord[] {
  const turns: TurnRecord[] = [];
  for (const entry of entries) {
    if (entry.type === 'turn-start') turns.push({ rootId, turnId: String(entry.turnId), starts: [], assistants: [], end: undefined });
    const turn = turns.at(-1);
    if (turn === undefined) continue;
    if (entry.type === 'step-start') turn.starts.push(entry);
    if (entry.type === 'message' && entry.role === 'assistant') turn.assistants.push(entry);
    if (entry.type === 'turn-end') turn.end = entry;
  }
  return turns;
}

const ms = (iso: unknown): number => Date.parse(String(iso));
const text = (e: Entry): string => (e.content ?? []).map((b) => b.text).join('');

describe('step leases under worker chaos', () => {
  it('worker processes killed while holding a step: every turn completes once, each output is recorded once, and a killed claim is re-claimed within the lease plus the claim time', { timeout: RUN_TIMEOUT_MS + 35_000 }, async () => {
    const server = await startServer({
      dataPath: ':memory:',
      env: { AGENTFOREST_STEP_LEASE_MS: String(LEASE_MS), AGENTFOREST_STEP_MAX_ATTEMPTS: '20' },
    });
    const api = new ServerClient(server);
    const pool = new WorkerPool(server, new Rng(SEED));
    for (let i = 0; i < WORKERS + SPARES; i++) pool.spawnStandby();
    await until(() => pool.ready === WORKERS + SPARES, `${WORKERS + SPARES} workers to start`, { timeoutMs: WORKER_START_MS });
    for (let i = 0; i < WORKERS; i++) pool.activate();

    const started = Date.now();
    const roots: string[] = [];
    for (let r = 0; r < ROOTS; r++) {
      const root = await api.createRoot({ id: `chaos-${r}` });
      roots.push(root.id);
      for (let t = 0; t < TURNS_PER_ROOT; t++) await api.send(root.id, `question ${t} of ${root.id}`);
    }
    const turns = ROOTS * TURNS_PER_ROOT;
    // The workers' lines say when to look (a worker is never killed once let to answer); the
    // server says whether every root is done.
    const done = async (): Promise<boolean> => {
      if (pool.endedTurns < turns) return false;
      const list = await api.expect<{ items: AgentView[] }>(200, 'GET', '/v1/agents?limit=1000');
      const chaos = list.items.filter((a) => a.id.startsWith('chaos-'));
      return chaos.length === ROOTS && chaos.every((a) => a.status === 'idle' && a.inbox.queued === 0);
    };
    await until(done, `${turns} turns to end (ended so far: ${pool.endedTurns}; worker stderr: ${pool.stderr.join('\n')})`, { timeoutMs: RUN_TIMEOUT_MS });
    const finished = Date.now();
    pool.stopAll();

    const records = (await Promise.all(roots.map(async (id) => turnsOf(id, await api.session(id))))).flat();
    const metrics = leaseCountsIn(await (await fetch(`${server.url}/metrics`)).text());

    const attemptOf = (start: Entry): number => Number(start['attempt'] ?? 1);
    const reclaims = records.flatMap((turn) => turn.starts.filter((start) => attemptOf(start) >= 2).map((start) => ({ turn, start })));
    const killOf = (start: Entry): Kill | undefined => pool.kills.find((k) => k.stepId === start.stepId && k.attempt === attemptOf(start) - 1);
    // A turn killed twice is measured to its end from its last kill (the re-claim after the
    // first kill is then measured by `holds`).
    const recoveries = reclaims.flatMap(({ turn, start }) => {
      const kill = killOf(start);
      return kill === undefined ? [] : [{ reclaimMs: ms(start.at) - kill.at, endMs: ms(turn.end?.at) - kill.at, last: start === turn.starts.at(-1) }];
    });
    // How long each claim kept its turn waiting: until the next claim of the step, or the turn's end.
    const holds = records.flatMap((turn) => turn.starts.map((start, i) => ({ stepId: start.stepId, attempt: attemptOf(start), ms: ms((turn.starts[i + 1] ?? turn.end)?.at) - ms(start.at) })));
    const lastKill = Math.max(...pool.kills.map((k) => k.at));
    const lastEnd = Math.max(...records.map((t) => ms(t.end?.at)));
    const spread = (values: number[]): { min: number; max: number; mean: number } | null =>
      values.length === 0 ? null : { min: Math.min(...values), max: Math.max(...values), mean: Math.round(values.reduce((a, b) => a + b, 0) / values.length) };
    console.log(`lease chaos: ${JSON.stringify({
      leaseMs: LEASE_MS,
      workers: WORKERS,
      turns: records.length,
      kills: pool.kills.length,
      reclaims: reclaims.length,
      lateAnswersRefused: pool.late.length,
      metric: metrics,
      killToReclaimMs: spread(recoveries.map((r) => r.reclaimMs)),
      killToTurnEndMs: spread(recoveries.filter((r) => r.last).map((r) => r.endMs)),
      longestHoldMs: Math.max(...holds.map((h) => h.ms)),
      lastKillToLastTurnEndMs: lastEnd - lastKill,
      runMs: finished - started,
    })}`);

    // Every turn completed, exactly once.
    expect(records).toHaveLength(turns);
    expect(records.filter((t) => t.end?.reason !== 'completed')).toEqual([]);
    // One output per turn, from the attempt that held the step; every claim of the step under its one id, attempts counting up.
    for (const turn of records) {
      const stepId = turn.starts[0]?.stepId;
      const attempts = turn.starts.map(attemptOf);
      expect({ turn: turn.turnId, stepIds: [...new Set(turn.starts.map((s) => s.stepId))], attempts }).toEqual({
        turn: turn.turnId,
        stepIds: [stepId],
        attempts: attempts.map((_, i) => i + 1),
      });
      expect(turn.assistants.map(text)).toEqual([`answer to ${String(stepId)} from attempt ${attempts.length}`]);
    }
    // Every killed claim was claimed again as the next attempt; every re-claim follows such a
    // kill (or that claim's answer came after its lease and was refused); the counters agree.
    expect(pool.kills.filter((k) => !reclaims.some(({ start }) => start.stepId === k.stepId && attemptOf(start) === k.attempt + 1))).toEqual([]);
    const lateOf = (start: Entry): boolean => pool.late.some((l) => l.stepId === start.stepId && l.attempt === attemptOf(start) - 1 && l.status === 409);
    expect(reclaims.filter(({ start }) => killOf(start) === undefined && !lateOf(start)).map(({ start }) => start)).toEqual([]);
    expect(metrics).toEqual({ expired: reclaims.length, reclaimed: reclaims.length });
    expect(pool.kills.length).toBeGreaterThan(0);
    expect(reclaims.length).toBeGreaterThan(0);
    // Each turn a kill left open ended within the lease plus the claim time after that kill; no
    // claim, killed or not, kept its turn waiting longer than that for the next claim or the end.
    expect(recoveries.filter((r) => r.last && r.endMs > LEASE_MS + CLAIM_SLACK_MS)).toEqual([]);
    expect(holds.filter((h) => h.ms > LEASE_MS + CLAIM_SLACK_MS)).toEqual([]);
    expect(await server.stop('SIGTERM')).toEqual({ code: 0, signal: null });
  });
});
