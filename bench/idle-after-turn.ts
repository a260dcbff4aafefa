/**
 * Resident memory per idle root that ran one turn (followup, full claim, output), against roots
 * that never ran one, on one server each: what an agent's step handling and its step cache keep
 * once it is idle again.
 *
 *   npx tsx bench/idle-after-turn.ts [--agents 10000]
 */
import { buildServer, call, pool, settledMemory, startServer } from './lib.js';

const i = process.argv.indexOf('--agents');
const agents = i === -1 ? 10_000 : Number(process.argv[i + 1]);

async function perAgent(turn: boolean, env: Record<string, string> = {}): Promise<number> {
  const s = await startServer(':memory:', env);
  try {
    const root = async (): Promise<void> => {
      const r = await call<{ agent: { id: string }; agentToken: string }>(`${s.url}/v1/agents`, 'POST', {});
      if (!turn) return;
      const token = { 'x-agent-token': r.agentToken };
      await call(`${s.url}/v1/agents/${r.agent.id}/messages`, 'POST', { content: 'go', delivery: 'followup' });
      const { step } = await call<{ step: { id: string } }>(`${s.url}/v1/agents/${r.agent.id}/steps/next`, 'POST', { waitMs: 1000 }, token);
      await call(`${s.url}/v1/agents/${r.agent.id}/steps/${step.id}/output`, 'POST', { content: 'done' }, token);
    };
    await pool(1_000, 32, root);
    const before = await settledMemory(s.url);
    await pool(agents, 32, root);
    const after = await settledMemory(s.url);
    return Math.round((after.rss - after.youngGeneration - (before.rss - before.youngGeneration)) / agents);
  } finally {
    await s.stop();
  }
}

buildServer();
const never = await perAgent(false);
const once = await perAgent(true);
const uncached = await perAgent(true, { AGENTFOREST_STEP_CACHE_MB: '0' });
console.log(JSON.stringify({ agents, rssBytesPerIdleRoot: { neverRanATurn: never, ranOneTurn: once, ranOneTurnNoConversationKept: uncached } }));
