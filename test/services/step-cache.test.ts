/**
 * The step cache is exact, on random runs through the real service (seeded, so a failure
 * replays from its seed). Each run drives one root, and in some runs a continuable child
 * (which gives the root `list_agents`), with random operations: followups, injects and steers
 * (staged while a step is claimed), outputs with the backend's own tool calls answered later
 * in random batches, service-owned calls, interrupts, compactions between steps (refused while
 * a step is claimed or awaits results, or when they would separate a call from its result),
 * the child settling and being cold-resumed, and in some runs stops and crashes of the process
 * with the root resumed after them (one of those on SQLite). Some runs bound the cache so
 * tightly that conversations are evicted and rebuilt from the store. A failure names its seed
 * and the operations that led to it.
 *
 * At every claim, per agent or from the worker pool, with or without `since`:
 * - the step's whole list is `renderMessages` over the session up to the step-start the claim
 *   wrote, its digest and token estimate as documented (fixtures/step-check.ts);
 * - it comes in delta form exactly when the documented rule says: `since` names one of the two
 *   latest steps this incarnation of the agent was handed, and no compaction entry was written
 *   after that step's step-start.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessage, PoolClaimResult, Step } from '../../src/contract/index.js';
import { isClaimable, queuedCount } from '../../src/domain/agent-state.js';
import type { LiveAgent } from '../../src/agents/live-agent.js';
import { SqliteSessionStore } from '../../src/adapters/sqlite/sqlite-store.js';
import { closeWithTest, tempDir } from '../fixtures/cleanup.js';
import { CrashingStore } from '../fixtures/crashing-store.js';
import { memoryDisk, type Disk } from '../fixtures/disks.js';
import { startChild } from '../fixtures/forest.js';
import { createRoot, postOutput, postResults, resumeRoot, send, session, settle, startHarness, until, type Entry, type Harness } from '../fixtures/harness.js';
import { interrupt, toChild } from '../fixtures/interrupts.js';
import { mulberry32 } from '../fixtures/random.js';
import { claimSinceRaw, expectExact, poolClaimSince } from '../fixtures/step-check.js';

const SEEDS = Array.from({ length: 40 }, (_, i) => i + 1);
const OPERATIONS = 40;

/** One agent as its backend knows it. */
interface Backend {
  id: string;
  kind: 'root' | 'child';
  instructions: string | undefined;
  /** The credential of its current incarnation (a resume or a cold resume makes a new one). */
  token: string;
  /** Step id → the whole list the backend got at that step's latest claim. */
  held: Map<string, ChatMessage[]>;
  /** Every claim in order: the step, the seq of the step-start it wrote, the incarnation's token. */
  claims: { stepId: string; upToSeq: number; token: string }[];
}

const WORDS = ['alpha', 'beta', 'gamma', 'délta', 'ε', '日本語', '🌲', 'quote"d', 'back\\slash', 'new\nline', 'tab\t'];

/** How one seed runs: its cache bound, whether the root has a child, and where its process lives. */
interface RunConfig {
  cacheBytes: number | undefined;
  withChild: boolean;
  /** A harness shared with other seeds (each drives its own forest in it), or */
  shared?: Harness;
  /** the disk of this seed's own processes, which it may stop, crash and start again. */
  disk?: Disk;
}

class Run {
  h!: Harness;
  private store: CrashingStore | undefined;
  readonly trace: string[] = [];
  root!: Backend;
  child: Backend | undefined;
  private calls = 0;
  private restarts = 0;

  constructor(
    readonly seed: number,
    private readonly random: () => number,
    private readonly config: RunConfig,
  ) {}

  async start(): Promise<void> {
    this.h = this.config.shared ?? (await this.open());
    const id = `r${this.seed}`;
    const instructions = this.pick([undefined, '', 'You are terse.', 'Système: réponds en 🌲.']);
    const created = await createRoot(this.h.app, instructions === undefined ? { id } : { id, instructions });
    this.root = { id, kind: 'root', instructions, token: created.token, held: new Map(), claims: [] };
    if (this.config.withChild) {
      const childInstructions = this.pick([undefined, 'Child rules.']);
      const child = await startChild(this.h, created, childInstructions === undefined ? { prompt: this.text() } : { prompt: this.text(), instructions: childInstructions });
      this.child = { id: child.id, kind: 'child', instructions: childInstructions, token: child.token, held: new Map(), claims: [] };
    }
    await this.quiesce();
  }

  async step(): Promise<void> {
    const agent = this.child !== undefined && this.random() < 0.45 ? this.child : this.root;
    const live = this.live(agent);
    const status = this.status(agent);
    const idle = live === undefined || live.state.turn.phase === 'idle';
    // Weighted so that turns mostly run on (claims, outputs, results) and long conversations build up.
    const options: [number, () => Promise<void>][] = [
      [idle ? 3 : 0.6, () => this.deliver(agent, 'followup')],
      [0.6, () => this.deliver(agent, 'inject')],
      [0.6, () => this.deliver(agent, 'steer')],
      [this.claimable(agent) ? 10 : 0.3, () => this.claim(agent)],
      [this.anyClaimable() ? 2 : 0, () => this.poolClaim()],
      [status === 'claimed' ? 10 : 0, () => this.output(agent)],
      [status === 'awaiting' ? 8 : 0, () => this.results(agent)],
      [live === undefined ? 0 : idle ? 0.1 : 0.5, () => this.interrupt(agent)],
      [1, () => this.compact(agent)],
      // A restart while a step is claimed is the likeliest: after a crash, it is claimed again under its id.
      [this.config.disk !== undefined && this.restarts < 3 ? (status === 'claimed' ? 2 : 0.6) : 0, () => this.restart()],
    ];
    const total = options.reduce((n, [w]) => n + w, 0);
    let r = this.random() * total;
    for (const [weight, run] of options) {
      r -= weight;
      if (weight > 0 && r < 0) {
        await run();
        break;
      }
    }
    await this.quiesce();
  }

  // --- operations --------------------------------------------------------------------------

  private async deliver(agent: Backend, delivery: 'followup' | 'inject' | 'steer'): Promise<void> {
    const content = this.text();
    this.note(`${delivery} to ${agent.id}: ${JSON.stringify(content)}`);
    const res = agent.kind === 'root' ? await send(this.h.app, agent.id, content, delivery) : await toChild(this.h, this.root, agent.id, content, delivery);
    expect(res.statusCode, res.body).toBe(202);
    const resumed = (res.json() as { resumed?: { agentToken: string } }).resumed;
    if (resumed !== undefined) {
      this.note(`  ${agent.id} cold-resumed`);
      agent.token = resumed.agentToken;
    }
  }

  private async claim(agent: Backend): Promise<void> {
    const since = this.since(agent);
    const claimable = this.claimable(agent);
    this.note(`claim ${agent.id} since ${since ?? '-'} (${claimable ? 'claimable' : 'none claimable'})`);
    const res = await claimSinceRaw(this.h, agent, since);
    if (!claimable) {
      // A settled child's last token is stale (403 UNAUTHORIZED); a live agent with nothing claimable answers 204.
      expect(res.statusCode, res.body).toBe(this.live(agent) === undefined ? 403 : 204);
      return;
    }
    expect(res.statusCode, res.body).toBe(200);
    await this.check(agent, (res.json() as { step: Step }).step, since);
  }

  private async poolClaim(): Promise<void> {
    const from = this.child !== undefined && this.random() < 0.5 ? this.child : this.root;
    const since = this.since(from);
    this.note(`pool claim since ${since ?? '-'} (of ${from.id})`);
    // In a shared harness the pool keeps to this seed's forest (rootId).
    const claimed: PoolClaimResult | null = await poolClaimSince(this.h, since, this.config.shared === undefined ? undefined : this.root.id);
    expect(claimed).not.toBeNull();
    const agent = [this.root, this.child].find((a) => a?.id === claimed!.agentId);
    expect(agent, `the pool handed out a step of ${claimed!.agentId}`).toBeDefined();
    expect(claimed!.agentToken).toBe(agent!.token);
    this.note(`  got ${agent!.id}`);
    await this.check(agent!, claimed!.step, since);
  }

  private async output(agent: Backend): Promise<void> {
    const step = this.openStep(agent)!;
    const kind = this.pick(agent.kind === 'root' && this.child !== undefined ? ['text', 'calls', 'calls', 'service', 'mixed'] : ['text', 'calls', 'calls']);
    const own = kind === 'calls' || kind === 'mixed' ? Array.from({ length: 1 + Math.floor(this.random() * 3) }, () => this.ownCall()) : [];
    const service = kind === 'service' || kind === 'mixed' ? [{ id: `svc${++this.calls}`, name: 'list_agents', input: this.random() < 0.5 ? {} : { scope: 'descendants' } }] : [];
    const body: Record<string, unknown> = {};
    if (kind === 'text' || this.random() < 0.5) body['content'] = this.text();
    if (own.length + service.length > 0) body['toolCalls'] = [...service, ...own];
    if (this.random() < 0.3) body['usage'] = { promptTokens: 10, completionTokens: 3, totalTokens: 13 };
    this.note(`output ${agent.id} ${step.id}: ${kind} (${own.map((c) => c.id).join(',')})`);
    const res = await postOutput(this.h.app, agent, step.id, body, step.attempt);
    expect(res.statusCode, res.body).toBe(200);
    const result = res.json() as { awaiting: { id: string }[]; toolResults: unknown[]; turn: string };
    expect(result.awaiting.map((c) => c.id)).toEqual(own.map((c) => c.id));
    expect(result.toolResults).toHaveLength(service.length);
    expect(result.turn).toBe(kind === 'text' ? 'ended' : 'open');
  }

  private async results(agent: Backend): Promise<void> {
    const step = this.openStep(agent)!;
    const ids = [...step.awaiting].sort(() => this.random() - 0.5);
    const batch = ids.slice(0, 1 + Math.floor(this.random() * ids.length));
    this.note(`results ${agent.id} ${step.id}: ${batch.join(',')}`);
    const results = batch.map((toolCallId) => (this.random() < 0.2 ? { toolCallId, content: this.text(), isError: true } : { toolCallId, content: this.text() }));
    const res = await postResults(this.h.app, agent, step.id, results, step.attempt);
    expect(res.statusCode, res.body).toBe(200);
  }

  private async interrupt(agent: Backend): Promise<void> {
    const keepInbox = this.random() < 0.8;
    this.note(`interrupt ${agent.id} keepInbox ${keepInbox}`);
    const res = await interrupt(this.h, agent.id, { keepInbox });
    expect(res.statusCode, res.body).toBe(202);
  }

  /** A compaction: written between steps (or of a settled child, by the operator), refused otherwise. */
  private async compact(agent: Backend): Promise<void> {
    const live = this.live(agent);
    const status = this.status(agent);
    const entries = await session(this.h.app, agent.id);
    if (entries.length === 0) return; // nothing to summarise yet
    const { valid, separating } = throughSeqs(entries);
    const headers: Record<string, string> = live === undefined ? {} : { 'x-agent-token': agent.token };
    const post = (body: Record<string, unknown>) => this.h.app.inject({ method: 'POST', url: `/v1/agents/${agent.id}/compactions`, headers, payload: body });
    const summary = `summary ${this.text()}`;
    let written = false;
    if (status === 'claimed' || status === 'awaiting') {
      this.note(`compact ${agent.id} while its step is ${status}: refused`);
      const res = await post({ summary });
      expect(res.statusCode, res.body).toBe(409);
      expect(res.json()).toMatchObject({ code: 'STEP_CONFLICT' });
    } else if (separating.length > 0 && this.random() < 0.25) {
      const throughSeq = this.pick(separating);
      this.note(`compact ${agent.id} through ${throughSeq}, between a call and its result: refused`);
      const res = await post({ summary, throughSeq });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json()).toMatchObject({ code: 'VALIDATION' });
    } else {
      const last = entries.at(-1)!.seq;
      const byDefault = valid.includes(last) && (valid.length === 1 || this.random() < 0.5);
      if (!byDefault && valid.length === 0) {
        this.note(`compact ${agent.id}: no throughSeq is valid`);
        return;
      }
      const throughSeq = byDefault ? undefined : this.pick(valid);
      this.note(`compact ${agent.id} ${live === undefined ? '(not resident) ' : ''}through ${throughSeq ?? `default (${last})`}`);
      const res = await post(throughSeq === undefined ? { summary } : { summary, throughSeq });
      expect(res.statusCode, res.body).toBe(201);
      expect(res.json()).toMatchObject({ type: 'compaction', summary, throughSeq: throughSeq ?? last, seq: last + 1 });
      written = true;
    }
    // A refused compaction writes nothing; a written one is the session's one new entry.
    expect((await session(this.h.app, agent.id)).length).toBe(entries.length + (written ? 1 : 0));
  }

  /**
   * A new process over the same store, and the root resumed (its token changes). The old one
   * stops (open turns end cancelled) or crashes (nothing more is written: a turn it left open
   * goes on at the resume, its claimed step claimable again under the same id). In between, a
   * compaction of the root, which is not resident then.
   */
  private async restart(): Promise<void> {
    this.restarts++;
    const crash = this.random() < 0.7;
    this.note(crash ? 'crash and resume' : 'stop and resume');
    if (crash) this.store!.crash();
    await this.h.close();
    await this.store!.inner.close();
    this.h = await this.open();
    if (this.random() < 0.5) await this.compact(this.root);
    this.root.token = (await resumeRoot(this.h, this.root.id)).token;
  }

  // --- the check at every claim ------------------------------------------------------------

  private async check(agent: Backend, step: Step, since: string | undefined): Promise<void> {
    const sinceClaim = since === undefined ? undefined : this.recentClaims(agent).find((c) => c.stepId === since);
    const held = since === undefined ? undefined : agent.held.get(since);
    const checked = await expectExact(this.h, agent.id, agent.instructions, step, Object.hasOwn(step, 'messagesSince') ? held : undefined);
    const compactedSince = sinceClaim !== undefined && checked.entries.some((e) => e.type === 'compaction' && e.seq > sinceClaim.upToSeq && e.seq <= checked.upToSeq);
    const delta = sinceClaim !== undefined && !compactedSince;
    this.note(`  ${step.id} attempt ${step.lease.attempt}: ${Object.hasOwn(step, 'messagesSince') ? 'delta' : 'full'} of ${checked.messages.length} messages`);
    expect(Object.hasOwn(step, 'messagesSince'), `delta form when since names a recent step with no compaction after it (${delta})`).toBe(delta);
    agent.held.set(step.id, checked.messages);
    agent.claims.push({ stepId: step.id, upToSeq: checked.upToSeq, token: agent.token });
  }

  /** The two latest steps this incarnation was handed (a step claimed again counts once, at its latest claim). */
  private recentClaims(agent: Backend): { stepId: string; upToSeq: number }[] {
    const latest = new Map<string, { stepId: string; upToSeq: number }>();
    for (const claim of agent.claims) {
      if (claim.token !== agent.token) continue;
      latest.delete(claim.stepId);
      latest.set(claim.stepId, claim);
    }
    return [...latest.values()].slice(-2);
  }

  /** A `since` for a claim of `agent`: none, one of its steps (recent or older), another agent's, or unknown. */
  private since(agent: Backend): string | undefined {
    const r = this.random();
    const other = agent === this.root ? this.child : this.root;
    const ownIds = agent.claims.map((c) => c.stepId);
    if (r < 0.3 || ownIds.length === 0) return undefined;
    if (r < 0.75) return ownIds.at(-1);
    if (r < 0.87) return this.pick(ownIds);
    if (r < 0.95 && other !== undefined && other.claims.length > 0) return other.claims.at(-1)!.stepId;
    return 'step_that_never_was';
  }

  // --- the agents' state, as the service holds it ---------------------------------------

  private live(agent: Backend): LiveAgent | undefined {
    const live = this.h.system.registry.get(agent.id);
    return live?.token === agent.token ? live : undefined;
  }

  private openStep(agent: Backend) {
    const turn = this.live(agent)?.state.turn;
    return turn?.phase === 'running' ? turn.turn.step : undefined;
  }

  private status(agent: Backend): string | undefined {
    return this.openStep(agent)?.status;
  }

  private claimable(agent: Backend): boolean {
    const live = this.live(agent);
    return live !== undefined && isClaimable(live.state);
  }

  private anyClaimable(): boolean {
    return this.claimable(this.root) || (this.child !== undefined && this.claimable(this.child));
  }

  /** Until nothing moves on its own: no admission pending, no turn closing, no child about to settle. */
  private async quiesce(): Promise<void> {
    await settle();
    await until(() => [this.root, this.child].every((a) => a === undefined || this.atRest(a)), `the agents at rest (seed ${this.seed})`);
  }

  private atRest(agent: Backend): boolean {
    const live = this.h.system.registry.get(agent.id);
    if (live === undefined) return true;
    const phase = live.state.turn.phase;
    if (phase === 'closing') return false;
    if (phase !== 'idle') return true;
    if (queuedCount(live.state) > 0) return live.state.parked;
    return agent.kind === 'root';
  }

  // --- processes and randomness -----------------------------------------------------------

  /** A "process": a harness over the disk's store, which the run can make crash. */
  private open(): Promise<Harness> {
    this.store = new CrashingStore(this.config.disk!.open());
    return startHarness({ store: this.store, ...(this.config.cacheBytes === undefined ? {} : { stepCacheBytes: this.config.cacheBytes }) });
  }

  private pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.random() * items.length)]!;
  }

  private text(): string {
    const n = 1 + Math.floor(this.random() * 6);
    const words = Array.from({ length: n }, () => this.pick(WORDS));
    // Now and then a long one, so conversations outgrow a small cache.
    if (this.random() < 0.15) words.push('x'.repeat(300 + Math.floor(this.random() * 700)));
    return words.join(' ');
  }

  private ownCall(): { id: string; name: string; input: unknown } {
    const id = `call${++this.calls}`;
    return { id, name: this.pick(['search', 'lookup', 'run_shell']), input: { q: this.text(), n: Math.floor(this.random() * 100) } };
  }

  private note(line: string): void {
    this.trace.push(line);
  }
}

/**
 * The throughSeqs a compaction of this log may take (past the previous compaction's, within
 * the log, no call at or before it whose result is after it or missing), and those refused for
 * separating a call from its result.
 */
function throughSeqs(entries: readonly Entry[]): { valid: number[]; separating: number[] } {
  const previous = entries.filter((e) => e.type === 'compaction').at(-1)?.throughSeq ?? 0;
  const resultAt = new Map<string, number>();
  const calls: { seq: number; id: string }[] = [];
  for (const e of entries) {
    if (e.type !== 'message') continue;
    for (const call of e.toolCalls ?? []) calls.push({ seq: e.seq, id: call.id });
    if (e.role === 'tool' && e.toolCallId !== undefined) resultAt.set(e.toolCallId, e.seq);
  }
  const valid: number[] = [];
  const separating: number[] = [];
  for (const e of entries) {
    if (e.seq <= previous) continue;
    const split = calls.some((c) => c.seq <= e.seq && (resultAt.get(c.id) ?? Infinity) > e.seq);
    (split ? separating : valid).push(e.seq);
  }
  return { valid, separating };
}

/** A third of the runs keep nothing (every full claim rebuilds), a third a little (eviction), a third the default bound. */
function cacheBytesOf(seed: number): number | undefined {
  return [1, 2_000, undefined][seed % 3];
}

/** Every tenth seed runs in processes of its own, which it stops or crashes and starts again (one of them on SQLite). */
const RESTARTING = SEEDS.filter((seed) => seed % 10 === 3);
/**
 * The others share one harness per cache bound (starting a harness costs more than a run), each
 * seed its own forest: what the other forests leave in the cache changes only which
 * conversations get evicted, which no step may show.
 */
const SHARING = SEEDS.filter((seed) => !RESTARTING.includes(seed));

/** One SQLite file for a seed's processes; commits skip fsync (a crash here is a test's, not the machine's). */
function sqliteDiskWithoutFsync(): Disk {
  const path = join(tempDir('agentforest-step-cache-'), 'agentforest.db');
  return {
    open: () => {
      const store = new SqliteSessionStore({ path, synchronous: 'normal' });
      closeWithTest(() => store.close());
      return store;
    },
  };
}

async function replay(seed: number, config: Omit<RunConfig, 'withChild'>): Promise<void> {
  const run = new Run(seed, mulberry32(seed), { ...config, withChild: seed % 2 === 0 || seed % 20 === 3 || seed % 40 === 13 });
  try {
    await run.start();
    for (let i = 0; i < OPERATIONS; i++) await run.step();
  } catch (error) {
    const e = error as Error;
    e.message = `seed ${seed} (cache ${config.cacheBytes ?? 'default'}${config.disk === undefined ? ', shared harness' : ''}), after:\n  ${run.trace.join('\n  ')}\n${e.message}`;
    throw e;
  }
}

describe('the step cache on random runs', () => {
  const shared = new Map<number | undefined, Harness>();
  beforeAll(async () => {
    for (const bytes of new Set(SHARING.map(cacheBytesOf))) shared.set(bytes, await startHarness(bytes === undefined ? {} : { stepCacheBytes: bytes }));
  });
  afterAll(async () => {
    for (const h of shared.values()) await h.close();
  });

  it.each(SHARING)('seed %i: every claimed step is the from-scratch rendering of its log, in delta form exactly when the rule says', async (seed) => {
    await replay(seed, { cacheBytes: cacheBytesOf(seed), shared: shared.get(cacheBytesOf(seed))! });
  });

  it.each(RESTARTING)('seed %i, with stops and crashes: every claimed step is exact, and none after a restart is a delta of one before it', async (seed) => {
    await replay(seed, { cacheBytes: cacheBytesOf(seed), disk: seed % 40 === 13 ? sqliteDiskWithoutFsync() : memoryDisk() });
  });
});
