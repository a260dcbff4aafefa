/**
 * The demo's compaction: the operator summarises the settled researcher's conversation (no
 * agent token: a settled child is not resident), and the researcher's next model request,
 * after the cold resume its follow-up makes, starts from that summary: its instructions (a
 * subagent started with spawn_subagent has none), one user message carrying the summary, then
 * only what follows the compaction's throughSeq.
 */
import { isDeepStrictEqual } from 'node:util';
import { RESEARCH_TASK } from './demo-model.js';
import { children, type Api, type Entry, type Node } from './forest.js';
import { hasTool, type ChatMessage, type ScriptedModelServer } from './scripted-model.js';

export const SUMMARY = 'Summary so far: asked for three sights in Lisbon, you reported Belém Tower, the Alfama quarter and LX Factory.';

export interface Compacted {
  researcherId: string;
  /** The researcher's status when the compaction was posted. */
  status: string;
  /** The entry as `POST /v1/agents/{id}/compactions` answered it. */
  entry: Entry;
  /** The scripted model's request count then: the researcher's next request comes after. */
  requestsBefore: number;
}

/** The researcher's model requests as the scripted model saw them: its first, and its first after the compaction. */
export interface ResearcherRequests {
  first: ChatMessage[];
  resumed: ChatMessage[];
}

/** Compact the settled researcher, as the operator. */
export async function compactResearcher(api: Api, scripted: ScriptedModelServer | undefined): Promise<Compacted> {
  const researcher = (await children(api, 'coordinator')).find((c) => c.label === 'researcher');
  if (researcher === undefined) throw new Error('the coordinator has no researcher to compact');
  const entry = (await api('POST', `/v1/agents/${researcher.id}/compactions`, { summary: SUMMARY })) as Entry;
  console.log(`   researcher [${researcher.status}]: POST /v1/agents/${researcher.id}/compactions {"summary": "${SUMMARY}"}`);
  console.log(`   → 201 ${JSON.stringify({ type: entry.type, seq: entry.seq, throughSeq: entry.throughSeq })}`);
  return { researcherId: researcher.id, status: researcher.status, entry, requestsBefore: scripted?.requests.length ?? 0 };
}

/** Undefined with a real model (its requests are not seen). After the compaction the researcher is the only child at work. */
export function researcherRequests(scripted: ScriptedModelServer | undefined, compacted: Compacted): ResearcherRequests | undefined {
  if (scripted === undefined) return undefined;
  const childRequests = scripted.requests.filter((r) => hasTool(r.body, 'report'));
  const first = childRequests.find((r) => r.body.messages.some((m) => m.role === 'user' && m.content === RESEARCH_TASK));
  const resumed = childRequests.find((r) => r.n > compacted.requestsBefore);
  if (first === undefined || resumed === undefined) return undefined;
  const shown = resumed.body.messages.map((m) => `${m.role} ${JSON.stringify(m.content)}`).join(', ');
  console.log(`   the researcher's next model request: [${shown}]`);
  return { first: first.body.messages, resumed: resumed.body.messages };
}

/**
 * The researcher's checks: its resumed request is its instructions as before, the summary,
 * then the messages of the entries after throughSeq up to that step (the follow-up), and
 * none of its first request's messages; its session kept every entry, gap-free, the
 * compaction among them. Without `requests` (a real model) the request is not checked.
 */
export function compactionChecks(researcher: Node | undefined, compacted: Compacted, requests: ResearcherRequests | undefined, followUp: string): [string, boolean][] {
  const entries = researcher?.entries ?? [];
  const through = compacted.entry.throughSeq ?? 0;
  const nextStep = entries.find((e) => e.type === 'step-start' && e.seq > compacted.entry.seq)?.seq ?? Infinity;
  const after = entries
    .filter((e) => e.type === 'message' && e.seq > through && e.seq < nextStep)
    .map((e) => ({ role: e.role, content: (e.content ?? []).map((b) => b.text).join('\n') }));
  const fromSummary = (r: ResearcherRequests): boolean => {
    const system = r.first.filter((m) => m.role === 'system');
    const earlier = r.first.filter((m) => m.role !== 'system');
    return (
      isDeepStrictEqual(r.resumed, [...system, { role: 'user', content: SUMMARY }, ...after]) &&
      after.some((m) => m.content === followUp) &&
      !r.resumed.some((m) => earlier.some((e) => isDeepStrictEqual(e, m)))
    );
  };
  const kept = entries.every((e, i) => e.seq === i + 1) && entries.filter((e) => e.type === 'turn-start').length === 2;
  return [
    ['the settled researcher was compacted by the operator, without an agent token', compacted.status === 'settled' && compacted.entry.type === 'compaction'],
    [
      "the researcher's resumed model request started from the summary, then the follow-up: nothing from before throughSeq",
      requests === undefined ? researcher !== undefined : fromSummary(requests),
    ],
    ["the researcher's session kept every entry, the compaction among them", kept && entries.some((e) => e.type === 'compaction' && e.seq === compacted.entry.seq)],
  ];
}
