/**
 * The demo's person in the loop: the operator puts an approval rule that asks about every call
 * of the prices tool in the coordinator's forest, and the coordinator asks the settled budget
 * subagent to price 3 nights in Lisbon and in Porto. The budget subagent calls the tool twice
 * in one step; both calls wait in the inbox (`GET /v1/approvals`) with the path of the agent
 * that asked, and the prices server sees neither. The operator approves the Lisbon call, which
 * then runs with the effect key its approval names, and denies the Porto one with a reason,
 * which the budget subagent reads as the call's error result. It reports both to the
 * coordinator.
 */
import { isDeepStrictEqual } from 'node:util';
import { COMPARE_INPUTS, COMPARED, PRICES_TOOL } from './demo-model.js';
import { children, session, type Api, type ApprovalView, type Entry } from './forest.js';
import type { McpDemoServer, SeenCall } from './mcp-server.js';

const ROOT = 'coordinator';
const RULE_ID = 'prices-ask';
const RULE = { tool: PRICES_TOOL, rootId: ROOT, decision: 'ask' };
/** What the operator tells the coordinator: it sends the budget subagent COMPARE_TASK. */
const ASK = 'Ask the budget subagent what 3 nights would cost in Lisbon and in Porto.';
/** The city whose call the operator approves; the other is denied with REASON. */
const APPROVED_CITY = 'Lisbon';
const REASON = 'We stay in Lisbon.';

export interface ApprovalDemoDeps {
  api: Api;
  server: McpDemoServer;
  /** True with the scripted model: the demo waits for both calls, and the checks are exact. */
  scripted: boolean;
  /** The operator's followup to the coordinator. */
  say: (content: string) => Promise<void>;
  until: <T>(what: string, probe: () => Promise<T | undefined>) => Promise<T>;
  /** Resolves once the forest is at rest with at least this many reports in the coordinator's session. */
  rest: (reports: number) => Promise<void>;
}

/** What the step showed, for its checks. */
export interface ApprovalRun {
  budgetId: string | undefined;
  /** The inbox (pending, the coordinator's forest) while the calls waited. */
  waiting: ApprovalView[];
  /** Calls the prices server saw while they waited. */
  seenWhileWaiting: number;
  /** The decisions' answers. */
  decided: ApprovalView[];
  /** Calls the prices server saw from the rule on. */
  seen: SeenCall[];
  /** The budget subagent's session after its report. */
  entries: Entry[];
  /** Its report of the comparison, as the coordinator's session has it. */
  report: string | undefined;
  /** The forest's approvals by state, at the end. */
  inbox: { pending: number; approved: number; denied: number };
}

async function inbox(api: Api, state: string): Promise<ApprovalView[]> {
  return ((await api('GET', `/v1/approvals?state=${state}&rootId=${ROOT}`)) as { items: ApprovalView[] }).items;
}

async function reports(api: Api): Promise<Entry[]> {
  return (await session(api, ROOT)).filter((e) => e.source?.kind === 'subagent-report');
}

function cityOf(approval: ApprovalView): unknown {
  return (approval.input as { city?: unknown } | null)?.city;
}

function text(entry: Entry | undefined): string {
  return (entry?.content ?? []).map((b) => b.text).join(' ');
}

/** The result of a call, from a session. */
function resultOf(entries: Entry[], toolCallId: string): Entry | undefined {
  return entries.find((e) => e.role === 'tool' && e.toolCallId === toolCallId);
}

/** Step 7: the rule, the two waiting calls, the decisions and what the budget subagent read. */
export async function approvalDemo(deps: ApprovalDemoDeps): Promise<ApprovalRun> {
  const { api, server, scripted, until } = deps;
  await api('PUT', `/v1/approval-rules/${RULE_ID}`, RULE);
  console.log(`   PUT /v1/approval-rules/${RULE_ID} ${JSON.stringify(RULE)} → 200`);
  const reportsBefore = (await reports(api)).length;
  const before = server.calls.length;
  await deps.say(ASK);

  const listed = await until("the budget subagent's calls wait in the inbox", async () => {
    const pending = await inbox(api, 'pending');
    if (pending.length >= (scripted ? COMPARE_INPUTS.length : 1)) return pending;
    // A real model may answer without the tool: then nothing waits.
    return !scripted && (await reports(api)).length > reportsBefore ? pending : undefined;
  });
  // Calls of one step are asked at the same moment; shown in the order the model made them.
  const rank = (a: ApprovalView): number => {
    const i = COMPARE_INPUTS.findIndex((input) => isDeepStrictEqual(a.input, input));
    return i < 0 ? COMPARE_INPUTS.length : i;
  };
  const waiting = [...listed].sort((a, b) => rank(a) - rank(b));
  const seenWhileWaiting = server.calls.length - before;
  const budgetId = (await children(api, ROOT)).find((c) => c.label === 'budget')?.id;
  const who = (id: string): string => (id === budgetId ? `${id} (budget)` : id);
  console.log(`   GET /v1/approvals?state=pending&rootId=${ROOT} → 200, ${waiting.length} waiting; the prices server saw ${seenWhileWaiting} calls meanwhile`);
  for (const a of waiting) console.log(`      ${a.id} ${a.tool} ${JSON.stringify(a.input)}  path ${a.path.map(who).join(' > ')}`);

  const approve = waiting.find((a) => cityOf(a) === APPROVED_CITY) ?? waiting[0];
  const decided: ApprovalView[] = [];
  const decide = async (a: ApprovalView, body: { decision: string; reason?: string }): Promise<void> => {
    const answer = (await api('POST', `/v1/approvals/${a.id}/decision`, body)) as ApprovalView;
    console.log(`   POST /v1/approvals/${a.id}/decision ${JSON.stringify(body)} → 200 ${answer.state}`);
    decided.push(answer);
  };
  for (const a of waiting) await decide(a, a === approve ? { decision: 'approve' } : { decision: 'deny', reason: REASON });
  if (!scripted) {
    // A real model may ask again after the denial: deny whatever else waits until it reports.
    await until('the budget subagent reports', async () => {
      for (const a of await inbox(api, 'pending')) await decide(a, { decision: 'deny', reason: REASON });
      return (await reports(api)).length > reportsBefore ? true : undefined;
    });
  }
  await deps.rest(reportsBefore + 1);

  const seen = server.calls.slice(before);
  const entries = budgetId === undefined ? [] : await session(api, budgetId);
  const report = (await reports(api))
    .filter((e) => e.source?.senderSessionId === budgetId)
    .map(text)
    .at(-1);
  const [approved, denied] = [await inbox(api, 'approved'), await inbox(api, 'denied')];
  const run: ApprovalRun = {
    budgetId,
    waiting,
    seenWhileWaiting,
    decided,
    seen,
    entries,
    report,
    inbox: { pending: (await inbox(api, 'pending')).length, approved: approved.length, denied: denied.length },
  };

  for (const a of decided) {
    const read = resultOf(entries, a.toolCallId);
    const call = seen.find((c) => isDeepStrictEqual(c.input, a.input));
    const ran = call === undefined ? 'the prices server never got it' : `the prices server got it with effect key ${call.metaKey} (${call.metaKey === a.effectKey ? "the approval's" : 'NOT the approval\'s'})`;
    console.log(`   ${a.state} ${JSON.stringify(a.input)}: ${ran}`);
    console.log(`      budget subagent read ${read === undefined ? 'no result' : `${read.isError === true ? 'the error' : 'the result'} ${JSON.stringify(text(read))}`}`);
  }
  console.log(`   coordinator's session: report ${JSON.stringify(report ?? 'missing')}`);
  return run;
}

/** What the demo's approvals part should show. */
export function approvalChecks(run: ApprovalRun): [string, boolean][] {
  const byCity = (list: ApprovalView[], city: string): ApprovalView | undefined => list.find((a) => cityOf(a) === city);
  const approved = byCity(run.decided, APPROVED_CITY);
  const denied = run.decided.find((a) => a !== approved);
  const [ranCall] = run.seen;
  const approvedRead = approved === undefined ? undefined : resultOf(run.entries, approved.toolCallId);
  const deniedRead = denied === undefined ? undefined : resultOf(run.entries, denied.toolCallId);
  const deniedText = `Error: a person denied the call to ${PRICES_TOOL}: ${REASON}`;
  const states = run.entries.filter((e) => e.type === 'approval').map((e) => `${cityOf(e.approval!) as string} ${e.approval!.state}`);
  return [
    [
      `the rule asked: the budget subagent's two calls of ${PRICES_TOOL} waited in the inbox with its path, and nothing ran while they waited`,
      run.budgetId !== undefined &&
        run.waiting.length === COMPARE_INPUTS.length &&
        COMPARE_INPUTS.every((input) => run.waiting.some((a) => isDeepStrictEqual(a.input, input))) &&
        run.waiting.every((a) => a.tool === PRICES_TOOL && a.agentId === run.budgetId && isDeepStrictEqual(a.path, [ROOT, run.budgetId])) &&
        run.seenWhileWaiting === 0,
    ],
    [
      "the approved call ran once on the prices server, with the effect key its approval names, and the budget subagent read the server's answer",
      approved?.state === 'approved' &&
        run.seen.length === 1 &&
        isDeepStrictEqual(ranCall?.input, approved.input) &&
        ranCall?.metaKey === approved.effectKey &&
        ranCall.headerKey === approved.effectKey &&
        approvedRead?.isError !== true &&
        text(approvedRead) === ranCall.answer,
    ],
    [
      "the denied call never reached the server; the budget subagent read the person's reason as its error result",
      denied?.state === 'denied' && denied.reason === REASON && deniedRead?.isError === true && text(deniedRead) === deniedText,
    ],
    [
      "the budget subagent's session kept each approval as it asked and as it was decided, and its report of both results reached the coordinator",
      isDeepStrictEqual([...states].sort(), ['Lisbon approved', 'Lisbon pending', 'Porto denied', 'Porto pending']) &&
        (run.report ?? '').includes(`${COMPARED}${ranCall?.answer ?? '?'} | ${deniedText}`) &&
        isDeepStrictEqual(run.inbox, { pending: 0, approved: 1, denied: 1 }),
    ],
  ];
}
