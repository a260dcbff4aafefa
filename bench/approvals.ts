/**
 * How soon a person's decision takes effect: the built service on a SQLite file (as `npm start`
 * runs it), one root per sample, each step's output calling a tool that an approval rule asks
 * about. Two paths, each timed from just before the decision is sent:
 *
 * - execution: a declared backend tool; a tool worker already long-polls
 *   `POST /v1/tool-calls/next`, and the time is when the call reaches it;
 * - next step: `spawn_subagent`, which the service runs itself once approved; a claim already
 *   long-polls the root's `POST …/steps/next`, and the time is when the next step reaches it.
 *
 * Beside each, the same call with no rule (`allow`), timed from just before the output is
 * posted: what the step protocol costs without a person, so the ratio is what a decision adds.
 * Samples of the four kinds alternate, so drift affects them alike. Medians and p99 over
 * `samples` each (after `warmup` of each). Writes bench/approvals.json (`--out` elsewhere).
 *
 *   npx tsx bench/approvals.ts [--samples 300] [--warmup 30] [--out path]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { arg, buildServer, call, root, round3, startServer } from './lib.js';

const samples = arg('samples', 300);
const warmup = arg('warmup', 30);
const outIndex = process.argv.indexOf('--out');
const out = resolve(outIndex === -1 ? join(root, 'bench', 'approvals.json') : process.argv[outIndex + 1]!);

type Kind = 'decision-to-execution' | 'output-to-execution' | 'decision-to-next-step' | 'output-to-next-step';
const KINDS: readonly Kind[] = ['decision-to-execution', 'output-to-execution', 'decision-to-next-step', 'output-to-next-step'];

interface Step {
  id: string;
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function main(): Promise<void> {
  buildServer();
  const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-approvals-'));
  const server = await startServer(join(dir, 'sessions.db'));
  const base = server.url;
  let n = 0;
  try {
    await call(`${base}/v1/backend-tools/bench_refund`, 'PUT', { description: 'Refunds an order.', parameters: { type: 'object' } });
    await call(`${base}/v1/backend-tools/bench_lookup`, 'PUT', { description: 'Looks an order up.', parameters: { type: 'object' } });
    await call(`${base}/v1/approval-rules/bench-refunds`, 'PUT', { tool: 'bench_refund', decision: 'ask' });

    /** One root mid-turn, its first step claimed. */
    const rootWithStep = async (prefix: string, tools: string[]): Promise<{ id: string; token: string; step: Step }> => {
      const id = `${prefix}-${n++}`;
      const created = await call<{ agentToken: string }>(`${base}/v1/agents`, 'POST', { id, tools });
      await call(`${base}/v1/agents/${id}/messages`, 'POST', { content: 'go', delivery: 'followup' });
      const claimed = await call<{ step: Step }>(`${base}/v1/agents/${id}/steps/next`, 'POST', { waitMs: 5_000 }, { 'x-agent-token': created.agentToken });
      return { id, token: created.agentToken, step: claimed.step };
    };
    const output = (agent: { id: string; token: string; step: Step }, name: string) =>
      call<{ approvals?: { id: string }[] }>(
        `${base}/v1/agents/${agent.id}/steps/${agent.step.id}/output`,
        'POST',
        { toolCalls: [{ id: 'c1', name, input: name === 'spawn_subagent' ? { prompt: 'look into it' } : { order: n } }] },
        { 'x-agent-token': agent.token },
      );

    /** Milliseconds from `act` to what `arrives` waits for; both start together, `arrives` first. */
    const timed = async (arrives: () => Promise<unknown>, act: () => Promise<unknown>): Promise<number> => {
      const arrival = arrives().then(() => performance.now());
      // Give the long-poll time to park at the server before the act that ends it (if it has
      // not, it is answered at once when it arrives: the time is then still act to arrival).
      await new Promise((r) => setTimeout(r, 5));
      const start = performance.now();
      await act();
      return (await arrival) - start;
    };
    const worker = () => call(`${base}/v1/tool-calls/next`, 'POST', { waitMs: 10_000 });
    const nextStep = (agent: { id: string; token: string }) => () => call(`${base}/v1/agents/${agent.id}/steps/next`, 'POST', { waitMs: 10_000 }, { 'x-agent-token': agent.token });
    const answerWorker = async (taken: Promise<unknown>): Promise<void> => {
      const { call: c } = (await taken) as { call: { agentId: string; agentToken: string; stepId: string; toolCallId: string } };
      await call(`${base}/v1/agents/${c.agentId}/steps/${c.stepId}/tool-results`, 'POST', { results: [{ toolCallId: c.toolCallId, content: 'done' }] }, { 'x-agent-token': c.agentToken });
    };

    const one = async (kind: Kind): Promise<number> => {
      switch (kind) {
        case 'decision-to-execution': {
          const agent = await rootWithStep('asked-refunds', ['bench_refund']);
          const approvalId = (await output(agent, 'bench_refund')).approvals![0]!.id;
          let taken!: Promise<unknown>;
          const ms = await timed(() => (taken = worker()), () => call(`${base}/v1/approvals/${approvalId}/decision`, 'POST', { decision: 'approve' }));
          await answerWorker(taken);
          return ms;
        }
        case 'output-to-execution': {
          const agent = await rootWithStep('lookups', ['bench_lookup']);
          let taken!: Promise<unknown>;
          const ms = await timed(() => (taken = worker()), () => output(agent, 'bench_lookup'));
          await answerWorker(taken);
          return ms;
        }
        case 'decision-to-next-step': {
          const agent = await rootWithStep('asked-spawns', ['spawn_subagent']);
          // Asked about in this forest only: the other kind's forests spawn without asking.
          await call(`${base}/v1/approval-rules/spawns-${agent.id}`, 'PUT', { tool: 'spawn_subagent', rootId: agent.id, decision: 'ask' });
          const approvalId = (await output(agent, 'spawn_subagent')).approvals![0]!.id;
          return timed(nextStep(agent), () => call(`${base}/v1/approvals/${approvalId}/decision`, 'POST', { decision: 'approve' }));
        }
        case 'output-to-next-step': {
          const agent = await rootWithStep('spawns', ['spawn_subagent']);
          return timed(nextStep(agent), () => output(agent, 'spawn_subagent'));
        }
      }
    };
    for (let i = 0; i < warmup; i++) for (const kind of KINDS) await one(kind);
    const times = new Map<Kind, number[]>(KINDS.map((k) => [k, []]));
    for (let i = 0; i < samples; i++) {
      const order = i % 2 === 0 ? KINDS : [...KINDS].reverse();
      for (const kind of order) times.get(kind)!.push(await one(kind));
    }
    const figures = Object.fromEntries(KINDS.map((k) => [k, { medianMs: round3(percentile(times.get(k)!, 50)), p99Ms: round3(percentile(times.get(k)!, 99)) }]));
    const result = { samples, warmup, store: 'sqlite', figures };
    writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    console.log(JSON.stringify(result, null, 2));
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
