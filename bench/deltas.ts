/**
 * What streamed answers cost: how soon a piece the model writes reaches a client watching
 * deltas, and the server CPU a streamed step takes against an unstreamed one. The service runs
 * as `npm start` runs it, on the memory store, driving roots with the built-in model driver
 * against the scripted model server (demo/scripted-model.ts), which runs in this process with
 * the clients, so every time is read on one clock (performance.now()). Each sample or turn is
 * a one-step turn of a root: a followup, and the model answers text with no tool calls.
 *
 * CPU. Two servers, one streaming (AGENTFOREST_MODEL_STREAM=true) and one not (false), the same
 * script: a text answer of 400 characters, in 8-character pieces when streamed (50 deltas), its
 * chunks `gap` ms apart, so most reach the service on their own as a model's tokens do; the
 * unstreamed answer comes whole after as long. Three arms, each `turns` turns a round on
 * `lanes` lanes, a lane's roots taking `per-root` turns each (so the context stays short):
 *
 * - unstreamed: the unstreaming server;
 * - streamed: the streaming server;
 * - subscribed: the streaming server, each root's forest stream asking for deltas.
 *
 * Every arm watches its roots' forest streams for the `turn-end` entries that end its turns;
 * only the third asks for deltas, so the third over the second is what publishing to a listener
 * costs. A round's roots and streams are made before its CPU is read, and closed after.
 * `warm-rounds` unmeasured rounds (the unstreaming server's arm twice in each, so both servers
 * take as many turns), then `rounds` rounds in which every arm runs once, in the six orders of
 * three in turn (with rounds a multiple of 6 each arm runs in each place equally often). An
 * arm's cost is its server's CPU (all threads, from /proc) over its rounds per turn; the spread
 * is each round's ratios. Read and write system calls per turn (/proc/<pid>/io) show how many
 * reads the answer took and how many writes its deltas.
 *
 * Latency, after the rounds (which warm it up), on the streaming server: each sample's root has
 * its forest stream open with `?deltas=true`. The model sends its role chunk, waits `hold` ms
 * (the service is idle again), notes the time and writes the first content chunk; the time is
 * when the client reads the delta with seq 1 of that step. The model holds the rest of the
 * answer until then, so the piece travels alone. The reference: the same chunk read by a client
 * of the model's stream itself (a fetch with `stream: true` to the scripted server), timed the
 * same way. The two kinds alternate, which goes first alternating too; `samples` of each after
 * `warmup`; medians and p99.
 *
 * Afterwards the run checks that every turn ended completed with the script's text recorded,
 * that only the streaming server asked the model to stream, and that the subscribers got every
 * delta, seq contiguous per step, none dropped. Writes bench/deltas.json (`--out` elsewhere).
 *
 *   npx tsx bench/deltas.ts [--warm-rounds 2] [--rounds 6] [--turns 300] [--lanes 15] [--per-root 10] [--gap 1]
 *                           [--samples 300] [--warmup 30] [--hold 2] [--out path]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ScriptedModelServer, type Reply } from '../demo/scripted-model.js';
import { buildServer, call, median, root as repoRoot, round3, startServer, type Server } from './lib.js';

/** The number given as `--name N`, or `fallback`; at least `min`. */
const option = (name: string, fallback: number, min: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  const value = i === -1 ? fallback : Number(process.argv[i + 1]);
  if (!(Number.isFinite(value) && value >= min)) throw new Error(`--${name} must be a number ≥ ${min}`);
  return value;
};
const samples = option('samples', 300, 1);
const warmup = option('warmup', 30, 0);
const holdMs = option('hold', 2, 0);
const warmRounds = option('warm-rounds', 2, 0);
const rounds = option('rounds', 6, 1);
const turns = option('turns', 300, 1);
const lanes = option('lanes', 15, 1);
const perRoot = option('per-root', 10, 1);
const gapMs = option('gap', 1, 0);
const outIndex = process.argv.indexOf('--out');
const out = resolve(outIndex === -1 ? join(repoRoot, 'bench', 'deltas.json') : process.argv[outIndex + 1]!);

const PIECE = 8;
const TEXT = 'Streamed answers reach a client piece by piece while the model writes them; the recorded step is the whole. '.repeat(4).slice(0, 400);
const PIECES = Math.ceil(TEXT.length / PIECE);
/** Chunks after the role chunk: the pieces, the finish chunk and the usage chunk. */
const CHUNKS_AFTER_ROLE = PIECES + 2;

type Arm = 'unstreamed' | 'streamed' | 'subscribed';
const ARMS: readonly Arm[] = ['unstreamed', 'streamed', 'subscribed'];
/** The six orders of the three arms, one a round. */
const ORDERS: readonly (readonly Arm[])[] = [
  ['unstreamed', 'streamed', 'subscribed'],
  ['streamed', 'subscribed', 'unstreamed'],
  ['subscribed', 'unstreamed', 'streamed'],
  ['subscribed', 'streamed', 'unstreamed'],
  ['streamed', 'unstreamed', 'subscribed'],
  ['unstreamed', 'subscribed', 'streamed'],
];

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

interface SseEvent {
  event: string;
  data: string;
}

/** Read an event stream to its end, handing on the events each read completed and when that read arrived. */
async function readEvents(body: ReadableStream<Uint8Array>, onEvents: (events: SseEvent[], at: number) => void): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let pending = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    const at = performance.now();
    pending += decoder.decode(value, { stream: true });
    const blocks = pending.split('\n\n');
    pending = blocks.pop()!;
    const events: SseEvent[] = [];
    for (const block of blocks) {
      let event = 'message';
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice('event: '.length);
        else if (line.startsWith('data: ')) data.push(line.slice('data: '.length));
      }
      if (data.length > 0) events.push({ event, data: data.join('\n') });
    }
    if (events.length > 0) onEvents(events, at);
  }
}

interface Delta {
  agentId: string;
  stepId: string;
  attempt: number;
  seq: number;
  text?: string;
}

/** What a subscriber saw of one step's deltas. */
interface StepSeen {
  last: number;
  gaps: number;
  text: string;
}

/** A root's forest stream: its turn ends, and (asked for) its deltas. */
class ForestWatch {
  readonly turnEnds: string[] = [];
  readonly steps = new Map<string, StepSeen>();
  dropped = 0;
  failure: unknown;
  private waiter: { count: number; resolve: () => void } | undefined;
  private readonly abort = new AbortController();

  private constructor(private readonly onDelta: ((delta: Delta, at: number) => void) | undefined) {}

  /** Open the stream; resolves once the service sent its first status snapshot (it has subscribed). */
  static async open(url: string, rootId: string, deltas: boolean, onDelta?: (delta: Delta, at: number) => void): Promise<ForestWatch> {
    const watch = new ForestWatch(onDelta);
    const res = await fetch(`${url}/v1/agents/${rootId}/events?forest=true${deltas ? '&deltas=true' : ''}`, { signal: watch.abort.signal });
    if (res.status !== 200 || res.body === null) throw new Error(`events of ${rootId}: ${res.status}`);
    let subscribed!: () => void;
    const live = new Promise<void>((r) => (subscribed = r));
    readEvents(res.body, (events, at) => {
      for (const e of events) {
        if (e.event === 'status') subscribed();
        else if (e.event === 'delta') watch.delta(JSON.parse(e.data) as Delta, at);
        else if (e.event === 'deltas-dropped') watch.dropped += (JSON.parse(e.data) as { count: number }).count;
        else if (e.event === 'entry') {
          const { entry } = JSON.parse(e.data) as { entry: { type: string; reason?: string } };
          if (entry.type === 'turn-end') watch.turnEnded(entry.reason ?? '');
        }
      }
    }).catch((error: unknown) => {
      if (!watch.abort.signal.aborted) watch.failure = error;
    });
    await live;
    return watch;
  }

  /** Resolves once the root's `count`th turn ended. */
  turnEnd(count: number): Promise<void> {
    if (this.turnEnds.length >= count) return Promise.resolve();
    return new Promise((resolve) => (this.waiter = { count, resolve }));
  }

  close(): void {
    this.abort.abort();
  }

  private turnEnded(reason: string): void {
    this.turnEnds.push(reason);
    if (this.waiter !== undefined && this.turnEnds.length >= this.waiter.count) {
      const { resolve } = this.waiter;
      this.waiter = undefined;
      resolve();
    }
  }

  private delta(delta: Delta, at: number): void {
    const seen = this.steps.get(delta.stepId) ?? { last: 0, gaps: 0, text: '' };
    if (delta.seq !== seen.last + 1) seen.gaps++;
    seen.last = delta.seq;
    seen.text += delta.text ?? '';
    this.steps.set(delta.stepId, seen);
    this.onDelta?.(delta, at);
  }
}

/** Read and write system calls a process made so far (all its threads; sockets included), or undefined off Linux. */
interface Io {
  reads: number;
  writes: number;
}

function ioOf(server: Server): Io | undefined {
  try {
    const fields = new Map(readFileSync(`/proc/${server.child.pid}/io`, 'utf8').trim().split('\n').map((l) => l.split(': ') as [string, string]));
    return { reads: Number(fields.get('syscr')), writes: Number(fields.get('syscw')) };
  } catch {
    return undefined; // not Linux, or /proc/<pid>/io not readable here
  }
}

/** One latency sample: when the model wrote the first content chunk, and when the client read it. */
interface Sample {
  kind: 'service' | 'direct';
  wrote?: number;
  read?: number;
  /** Called when the client read it: the model writes the rest. */
  release: () => void;
  released: Promise<void>;
}

function newSample(kind: Sample['kind']): Sample {
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  return { kind, release, released };
}

async function main(): Promise<void> {
  const began = performance.now();
  const loadBefore = loadavg();
  buildServer();

  let phase: 'latency' | 'cpu' = 'cpu';
  let current: Sample | undefined;
  const requests = { streamed: 0, unstreamed: 0 };
  const model = await ScriptedModelServer.start(async (request): Promise<Reply> => {
    const answer = { content: TEXT };
    if (request.stream !== true) {
      requests.unstreamed++;
      // The whole answer, as late as the last chunk of a streamed one.
      if (phase === 'cpu') await sleep(gapMs * CHUNKS_AFTER_ROLE);
      return { answer };
    }
    requests.streamed++;
    if (phase === 'cpu') return { answer, pacing: { pieceChars: PIECE, beforeChunk: (i) => (i > 0 ? sleep(gapMs) : undefined) } };
    const sample = current;
    return {
      answer,
      pacing: {
        pieceChars: PIECE,
        beforeChunk: async (i) => {
          if (sample === undefined) return;
          if (i === 1) {
            await sleep(holdMs);
            sample.wrote = performance.now();
          } else if (i === 2) {
            // The rest waits for the client to read the first piece (or a second: the check then fails).
            await Promise.race([sample.released, sleep(1000)]);
          }
        },
      },
    };
  });
  const spec = { provider: 'openai-compatible', baseUrl: model.url, model: 'scripted-1' };
  const streaming = await startServer(':memory:', { AGENTFOREST_MODEL_STREAM: 'true' });
  const unstreaming = await startServer(':memory:', { AGENTFOREST_MODEL_STREAM: 'false' });
  const opened: ForestWatch[] = [];
  try {
    const newRoot = async (url: string): Promise<string> => (await call<{ agent: { id: string } }>(`${url}/v1/agents`, 'POST', { model: spec })).agent.id;

    // CPU.
    const serverOf = (arm: Arm): Server => (arm === 'unstreamed' ? unstreaming : streaming);
    const rootsOf = new Map<Arm, { id: string; watch: ForestWatch; asked: number }[]>(ARMS.map((a) => [a, []]));
    const perLane = Math.ceil(turns / lanes);
    const cpuRounds = new Map<Arm, { turns: number; seconds: number; cpu: number | undefined; main: number | undefined; io: Io | undefined }[]>(ARMS.map((a) => [a, []]));
    const armTurns: Record<Arm, number> = { unstreamed: 0, streamed: 0, subscribed: 0 };
    const runArm = async (arm: Arm, measured: boolean): Promise<void> => {
      const s = serverOf(arm);
      // This round's roots and streams, before its CPU is read.
      const laneRoots: { id: string; watch: ForestWatch; asked: number }[][] = [];
      for (let l = 0; l < lanes; l++) {
        const list: { id: string; watch: ForestWatch; asked: number }[] = [];
        for (let k = 0; k < Math.ceil(perLane / perRoot); k++) {
          const id = await newRoot(s.url);
          const watch = await ForestWatch.open(s.url, id, arm === 'subscribed');
          opened.push(watch);
          list.push({ id, watch, asked: 0 });
        }
        laneRoots.push(list);
        rootsOf.get(arm)!.push(...list);
      }
      const ioBefore = ioOf(s);
      const before = [s.cpuSeconds(), s.mainThreadCpuSeconds()];
      const start = performance.now();
      await Promise.all(laneRoots.map(async (list) => {
        for (let t = 0; t < perLane; t++) {
          const r = list[Math.floor(t / perRoot)]!;
          const ended = r.watch.turnEnd(++r.asked);
          await call(`${s.url}/v1/agents/${r.id}/messages`, 'POST', { content: 'go', delivery: 'followup' });
          await ended;
        }
      }));
      const seconds = (performance.now() - start) / 1000;
      const after = [s.cpuSeconds(), s.mainThreadCpuSeconds()];
      const ioAfter = ioOf(s);
      for (const list of laneRoots) for (const r of list) r.watch.close();
      // The streams' ends are handled before the next arm's CPU is read.
      await sleep(100);
      const delta = (i: number): number | undefined => (before[i] === undefined || after[i] === undefined ? undefined : after[i]! - before[i]!);
      const io = ioBefore === undefined || ioAfter === undefined ? undefined : { reads: ioAfter.reads - ioBefore.reads, writes: ioAfter.writes - ioBefore.writes };
      armTurns[arm] += perLane * lanes;
      if (measured) cpuRounds.get(arm)!.push({ turns: perLane * lanes, seconds, cpu: delta(0), main: delta(1), io });
    };
    // Warm-up, unmeasured: each server takes as many turns (the unstreaming one's arm runs twice).
    for (let w = 0; w < warmRounds; w++) for (const arm of [...ARMS, 'unstreamed'] as const) await runArm(arm, false);
    for (let r = 0; r < rounds; r++) for (const arm of ORDERS[r % ORDERS.length]!) await runArm(arm, true);
    const cpuRequests = { ...requests };

    // Latency, on the streaming server warmed up by the rounds.
    phase = 'latency';
    const latencyRoots: { id: string; watch: ForestWatch; turns: number }[] = [];
    let latencyRoot: (typeof latencyRoots)[number] | undefined;
    const serviceSample = async (): Promise<Sample> => {
      if (latencyRoot === undefined || latencyRoot.turns === 20) {
        latencyRoot?.watch.close();
        const id = await newRoot(streaming.url);
        const watch = await ForestWatch.open(streaming.url, id, true, (delta, at) => {
          const s = current;
          if (s?.kind === 'service' && delta.agentId === id && delta.seq === 1 && s.read === undefined) {
            s.read = at;
            s.release();
          }
        });
        opened.push(watch);
        latencyRoots.push((latencyRoot = { id, watch, turns: 0 }));
      }
      const r = latencyRoot;
      const s = (current = newSample('service'));
      const ended = r.watch.turnEnd(++r.turns);
      await call(`${streaming.url}/v1/agents/${r.id}/messages`, 'POST', { content: 'go', delivery: 'followup' });
      await ended;
      return s;
    };
    let directText = '';
    const directSample = async (): Promise<Sample> => {
      const s = (current = newSample('direct'));
      const res = await fetch(`${model.url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify({ model: 'scripted-1', messages: [{ role: 'user', content: 'go' }], stream: true, stream_options: { include_usage: true } }),
      });
      let text = '';
      await readEvents(res.body!, (events, at) => {
        for (const e of events) {
          if (e.data === '[DONE]') continue;
          const piece = (JSON.parse(e.data) as { choices: { delta?: { content?: string | null } }[] }).choices[0]?.delta?.content ?? '';
          if (piece !== '' && s.read === undefined) {
            s.read = at;
            s.release();
          }
          text += piece;
        }
      });
      directText = text;
      return s;
    };
    const latency = { service: [] as number[], direct: [] as number[] };
    let unpaired = 0;
    for (let i = 0; i < warmup + samples; i++) {
      const order = i % 2 === 0 ? [serviceSample, directSample] : [directSample, serviceSample];
      for (const take of order) {
        const s = await take();
        if (s.wrote === undefined || s.read === undefined) unpaired++;
        else if (i >= warmup) latency[s.kind].push(s.read - s.wrote);
      }
    }
    current = undefined;
    for (const r of latencyRoots) r.watch.close();
    const latencyChecks = {
      unpaired,
      turnsNotCompleted: latencyRoots.reduce((n, r) => n + r.watch.turnEnds.filter((x) => x !== 'completed').length, 0),
      stepsWithGapsOrOtherText: latencyRoots.reduce((n, r) => n + [...r.watch.steps.values()].filter((x) => x.gaps > 0 || x.text !== TEXT || x.last !== PIECES).length, 0),
      directTextIsTheScript: directText === TEXT,
    };

    // Checks: the sessions as recorded, the requests' kinds, what the subscribers saw.
    const sessions = { turnsNotCompleted: 0, turnsMissing: 0, assistantTextsNotTheScript: 0 };
    for (const arm of ARMS) {
      for (const r of rootsOf.get(arm)!) {
        const page = await call<{ entries: { type: string; reason?: string; role?: string; content?: { type: string; text?: string }[] }[] }>(
          `${serverOf(arm).url}/v1/agents/${r.id}/session?limit=1000`,
          'GET',
        );
        const ends = page.entries.filter((e) => e.type === 'turn-end');
        sessions.turnsMissing += Math.max(0, r.asked - ends.length);
        sessions.turnsNotCompleted += ends.filter((e) => e.reason !== 'completed').length;
        const answers = page.entries.filter((e) => e.type === 'message' && e.role === 'assistant');
        sessions.assistantTextsNotTheScript += answers.filter((e) => (e.content ?? []).map((c) => c.text ?? '').join('') !== TEXT).length + Math.max(0, ends.length - answers.length);
      }
    }
    const subscribed = rootsOf.get('subscribed')!;
    const seenSteps = subscribed.flatMap((r) => [...r.watch.steps.values()]);
    const checks = {
      latency: latencyChecks,
      sessions,
      modelRequests: {
        streamed: cpuRequests.streamed,
        unstreamed: cpuRequests.unstreamed,
        expectedStreamed: armTurns.streamed + armTurns.subscribed,
        expectedUnstreamed: armTurns.unstreamed,
      },
      subscriber: {
        steps: seenSteps.length,
        expectedSteps: armTurns.subscribed,
        stepsWithGaps: seenSteps.filter((x) => x.gaps > 0).length,
        stepsNotAllDeltas: seenSteps.filter((x) => x.last !== PIECES || x.text !== TEXT).length,
        deltasDropped: subscribed.reduce((n, r) => n + r.watch.dropped, 0),
      },
      streamFailures: opened.filter((w) => w.failure !== undefined).length,
    };
    const ok =
      latencyChecks.unpaired === 0 && latencyChecks.turnsNotCompleted === 0 && latencyChecks.stepsWithGapsOrOtherText === 0 && latencyChecks.directTextIsTheScript &&
      sessions.turnsNotCompleted === 0 && sessions.turnsMissing === 0 && sessions.assistantTextsNotTheScript === 0 &&
      checks.modelRequests.streamed === checks.modelRequests.expectedStreamed && checks.modelRequests.unstreamed === checks.modelRequests.expectedUnstreamed &&
      checks.subscriber.steps === armTurns.subscribed && checks.subscriber.stepsWithGaps === 0 && checks.subscriber.stepsNotAllDeltas === 0 && checks.subscriber.deltasDropped === 0 &&
      checks.streamFailures === 0;

    // Figures.
    const ms = (values: number[]) => ({ medianMs: round3(percentile(values, 50)), p99Ms: round3(percentile(values, 99)) });
    const known = (arm: Arm, key: 'cpu' | 'main'): boolean => cpuRounds.get(arm)!.every((x) => x[key] !== undefined);
    const us = (arm: Arm, key: 'cpu' | 'main'): number | null => {
      if (!known(arm, key)) return null;
      const list = cpuRounds.get(arm)!;
      return +((list.reduce((a, x) => a + x[key]!, 0) / list.reduce((a, x) => a + x.turns, 0)) * 1e6).toFixed(1);
    };
    const perArm = <T>(f: (arm: Arm) => T): Record<Arm, T> => Object.fromEntries(ARMS.map((a) => [a, f(a)])) as Record<Arm, T>;
    const roundUs = (arm: Arm): number[] => cpuRounds.get(arm)!.map((x) => (x.cpu ?? Number.NaN) / x.turns * 1e6);
    const ratioRounds = (arm: Arm): number[] => roundUs(arm).map((v, i) => round3(v / roundUs('unstreamed')[i]!));
    const spread = (values: number[]) => ({ min: Math.min(...values), median: median(values), max: Math.max(...values) });
    const cpuUs = perArm((a) => us(a, 'cpu'));
    const mainUs = perArm((a) => us(a, 'main'));
    const over = (a: number | null, b: number | null): number | null => (a === null || b === null ? null : round3(a / b));
    const result = {
      at: new Date().toISOString(),
      setup: {
        store: 'memory',
        answerChars: TEXT.length,
        pieceChars: PIECE,
        deltasPerStep: PIECES,
        latency: { samples, warmup, holdMs },
        cpu: { warmRounds, rounds, turnsPerRound: perLane * lanes, lanes, turnsPerRoot: perRoot, chunkGapMs: gapMs },
      },
      latency: {
        service: ms(latency.service),
        direct: ms(latency.direct),
        addedMedianMs: round3(percentile(latency.service, 50) - percentile(latency.direct, 50)),
        addedP99Ms: round3(percentile(latency.service, 99) - percentile(latency.direct, 99)),
        serviceOverDirectMedian: round3(percentile(latency.service, 50) / percentile(latency.direct, 50)),
      },
      cpu: {
        usPerStep: cpuUs,
        mainThreadUsPerStep: mainUs,
        streamedOverUnstreamed: over(cpuUs.streamed, cpuUs.unstreamed),
        subscribedOverUnstreamed: over(cpuUs.subscribed, cpuUs.unstreamed),
        subscribedOverStreamed: over(cpuUs.subscribed, cpuUs.streamed),
        mainThread: {
          streamedOverUnstreamed: over(mainUs.streamed, mainUs.unstreamed),
          subscribedOverUnstreamed: over(mainUs.subscribed, mainUs.unstreamed),
        },
        usPerStepRounds: perArm((a) => roundUs(a).map((v) => +v.toFixed(1))),
        roundSpread: { streamedOverUnstreamed: spread(ratioRounds('streamed')), subscribedOverUnstreamed: spread(ratioRounds('subscribed')) },
        // How many reads the model's answer took (one a chunk when each arrives on its own) and writes the deltas took.
        syscallsPerStep: perArm((a) => {
          const list = cpuRounds.get(a)!;
          if (list.some((x) => x.io === undefined)) return null;
          const n = list.reduce((t, x) => t + x.turns, 0);
          return { reads: +(list.reduce((t, x) => t + x.io!.reads, 0) / n).toFixed(1), writes: +(list.reduce((t, x) => t + x.io!.writes, 0) / n).toFixed(1) };
        }),
        turnsPerSecondMedianRound: perArm((a) => Math.round(median(cpuRounds.get(a)!.map((x) => x.turns / x.seconds)))),
      },
      checks: { ok, ...checks },
      machine: { loadAverageBefore: loadBefore.map((x) => +x.toFixed(2)), loadAverageAfter: loadavg().map((x) => +x.toFixed(2)) },
    };
    writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    console.log(JSON.stringify(result, null, 2));
    console.log(`${((performance.now() - began) / 1000).toFixed(1)} s, build included; written to ${out}`);
    if (!ok) process.exitCode = 1;
  } finally {
    for (const w of opened) w.close();
    await Promise.all([streaming.stop(), unstreaming.stop()]);
    await model.close();
  }
}

await main();
