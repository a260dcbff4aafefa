/**
 * `npm run demo`: a whole forest, driven by the service's built-in model driver.
 *
 * Starts the service (dist/server.js) on a temporary SQLite file, the demo's own MCP tool
 * server on 127.0.0.1 (mcp-server.ts, registered as `prices`) and, unless DEMO_MODEL_URL names
 * a real endpoint, a deterministic scripted chat-completions server on 127.0.0.1. Then: a
 * coordinator root, granted the prices tools, spawns a researcher (its report arrives quietly),
 * the report delivery is switched to wakeup, and the coordinator spawns a budget subagent,
 * which inherits the grant, asks the MCP tool what the trip costs and reports what it said; its
 * report wakes the coordinator (mcp-lookup.ts shows the call's effect key on both sides). The
 * demo, as the operator, compacts the settled researcher (a summary, no agent token), and the
 * coordinator sends it a follow-up: a cold resume whose first model request starts from the
 * summary, and whose report wakes the coordinator once more. Then the coordinator starts a
 * translator, whose first model request the scripted model holds, and queues it a second task;
 * the operator interrupts the translator: its turn ends `cancelled`, the held request is
 * aborted, and the queued task waits until the coordinator's next message, which runs both.
 * Then the operator puts an approval rule that asks about the prices tool in the coordinator's
 * forest; the budget subagent, asked to price two cities, calls it twice, both calls wait in
 * the inbox, and the operator approves one (it runs) and denies the other with a reason, which
 * the model reads (approvals.ts). Last, a second root, the planner, is created with a budget of
 * 5 steps: its forecaster's third step spends the rest, the forest stops (paused, no model
 * request), and once the operator raises the budget the forecaster finishes (budget.ts).
 * Prints the coordinator's forest as a tree with every session's messages, and checks what it should show.
 *
 *   DEMO_MODEL_URL=https://api.deepseek.com/v1 DEMO_API_KEY=sk-... npm run demo
 *   (DEMO_MODEL picks the model name; default deepseek-chat, or gpt-4o-mini for api.openai.com)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { approvalChecks, approvalDemo, type ApprovalRun } from './approvals.js';
import { budgetDemo, BudgetScript } from './budget.js';
import { compactionChecks, compactResearcher, researcherRequests, type Compacted, type ResearcherRequests } from './compaction.js';
import { demoModel, FOLLOW_UP, HELD_TASK, isHeld, QUEUED_TASK, WAKING_TASK } from './demo-model.js';
import { children, client, printTree, session, type Api, type Entry, type Node, type View } from './forest.js';
import { coordinatorTools, COORDINATOR_TOOLS, lookupChecks, priceLookup, registerToolServer, type PriceLookup } from './mcp-lookup.js';
import { startMcpServer } from './mcp-server.js';
import { ScriptedModelServer } from './scripted-model.js';

const realUrl = process.env.DEMO_MODEL_URL;
const deadlineMs = realUrl === undefined ? 30_000 : 300_000;

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'agentforest-demo-'));
  const budgetScript = new BudgetScript();
  const scripted = realUrl === undefined ? await ScriptedModelServer.start((request) => budgetScript.answer(request) ?? demoModel(request)) : undefined;
  const model = {
    provider: 'openai-compatible',
    baseUrl: realUrl ?? scripted!.url,
    model: process.env.DEMO_MODEL ?? (realUrl === undefined ? 'scripted-demo' : realUrl.includes('openai.com') ? 'gpt-4o-mini' : 'deepseek-chat'),
    ...(process.env.DEMO_API_KEY === undefined ? {} : { apiKeyEnv: 'DEMO_API_KEY' }),
    maxSteps: 8,
  };
  let service: Awaited<ReturnType<typeof startService>> | undefined;
  const mcp = await startMcpServer();
  let ok = false;
  try {
    service = await startService(dir);
    const api = client(service.url);
    console.log(`service   ${service.url}  (SQLite file ${join(dir, 'demo.db')}, log ${join(dir, 'service.log')})`);
    console.log(`model     ${model.baseUrl}  ${model.model}${scripted === undefined ? '' : '  (scripted, deterministic)'}`);
    console.log(`mcp       ${mcp.url}  (the demo's MCP tool server, demo/mcp-server.ts)\n`);

    step('0. the operator registers the MCP server and grants its tools to the coordinator, for its subagents too');
    const registered = await registerToolServer(api, mcp);
    await api('PUT', '/v1/packages/subagent-report', { config: { reportDelivery: 'quiet' } });
    await api('POST', '/v1/agents', {
      id: 'coordinator',
      tools: COORDINATOR_TOOLS,
      instructions:
        'You coordinate background subagents to plan a weekend trip. Start subagents with spawn_subagent (give each a label), ' +
        'give a settled subagent more work with send_message, and answer briefly. Subagents deliver findings with their report tool.',
      model,
    });
    const effective = await coordinatorTools(api);
    step('1. the coordinator starts a researcher; its report arrives quietly (no coordinator turn)');
    await say(api, 'Plan a weekend in Lisbon. Start a researcher subagent for the sights.');
    await quiet(api, (s) => s.some((e) => e.source?.kind === 'subagent-report'));

    step('2. report delivery switches to wakeup; the coordinator starts a budget subagent, which asks the MCP tool');
    step('   what the trip costs and reports what it said; its report wakes the coordinator');
    await api('PUT', '/v1/packages/subagent-report', { config: { reportDelivery: 'wakeup' } });
    await say(api, 'Now start a budget subagent for the costs.');
    await quiet(api, (s) => reportCount(s) >= 2);
    const lookup = await priceLookup(api, mcp, registered, effective);

    step('3. the operator compacts the settled researcher: later model requests start from a summary');
    const compacted = await compactResearcher(api, scripted);

    step('4. asked by the operator, the coordinator sends the researcher a follow-up: a cold resume whose model');
    step('   request starts from the summary; its report wakes the coordinator again');
    await say(api, 'Ask the researcher which of those sights are free.');
    await quiet(api, (s) => reportCount(s) >= 3);
    const researcherSaw = researcherRequests(scripted, compacted);

    step('5. the coordinator starts a translator, whose model request the scripted model holds, and queues it a');
    step('   second task; the operator interrupts the translator: its turn ends cancelled, the request is aborted,');
    step('   and the queued task waits');
    const interrupted = await interruptTranslator(api, scripted);

    step("6. the coordinator's next message to the translator wakes it: the queued task runs, then the new one");
    await say(api, 'Tell the translator to go on.');
    await quiet(api, (s) => scripted === undefined || reportCount(s) >= 5);

    step("7. an approval rule makes the prices tool ask a person in the coordinator's forest; asked to price Lisbon");
    step('   and Porto, the budget subagent calls it twice and both calls wait in the inbox; the operator approves');
    step('   one and denies the other with a reason, and the budget subagent reports what it read');
    const approvals = await approvalDemo({
      api,
      server: mcp,
      scripted: scripted !== undefined,
      say: (content) => say(api, content),
      until,
      rest: (n) => quiet(api, (s) => reportCount(s) >= n),
    });

    step('8. a second root, the planner, has a budget of 5 steps for its forest; it starts a forecaster that reports');
    step("   a day per step: the forecaster's third step spends the rest, and the budget stops the forest");
    const budget = budgetDemo({ api, url: service.url, model, scripted, until, pause });
    await budget.stop();
    step('9. the operator raises the budget to 10 steps: the forecaster goes on and the forest finishes');
    await budget.raise();

    console.log("\nthe coordinator's forest:\n");
    const tree = await printTree(api, 'coordinator');
    ok = check(tree, lookup, interrupted, compacted, researcherSaw, approvals, budget.checks());
  } finally {
    await service?.stop();
    await mcp.close();
    await scripted?.close();
    if (process.env.DEMO_KEEP === undefined) await rm(dir, { recursive: true, force: true });
    else console.log(`\nkept ${dir}`);
  }
  process.exitCode = ok || realUrl !== undefined ? 0 : 1;
}

function step(text: string): void {
  console.log(`== ${text}`);
}

/** The operator's followup to the coordinator. */
async function say(api: Api, content: string): Promise<void> {
  await api('POST', '/v1/agents/coordinator/messages', { content, delivery: 'followup' });
}

function reportCount(coordinator: Entry[]): number {
  return coordinator.filter((e) => e.source?.kind === 'subagent-report').length;
}

async function view(api: Api, id: string): Promise<View> {
  return (await api('GET', `/v1/agents/${id}`)) as View;
}

/** Poll `probe` every 100 ms until it returns something. */
async function until<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + deadlineMs;
  while (Date.now() < deadline) {
    const found = await probe();
    if (found !== undefined) return found;
    await pause(100);
  }
  throw new Error(`${what}: not within ${deadlineMs / 1000} s`);
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** True once `settled` settles, false if `ms` pass first. */
async function within(settled: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms)));
  try {
    return await Promise.race([settled.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** What the interrupt did, seen before anything woke the translator again. */
interface Interrupted {
  translatorId: string;
  /** What `POST /v1/agents/{id}/interrupt` answered. */
  interrupted: string[];
  /** The scripted server saw the held request's connection close unanswered (undefined with a real model). */
  requestAborted: boolean | undefined;
  /** The translator's last turn-end reason, messages queued and turns started, after a calm of 0.3 s. */
  lastEnd: string | undefined;
  queued: number;
  turns: number;
}

/**
 * Step 5. The translator's first request is held by the scripted model, and a second task is
 * queued behind that open turn; then the operator interrupts it. With a real model the
 * translator may have finished first: the demo interrupts whatever is there.
 */
async function interruptTranslator(api: Api, scripted: ScriptedModelServer | undefined): Promise<Interrupted> {
  await say(api, 'Start a translator subagent for a few phrases.');
  const translator = await until('the translator holds a model request', async () => {
    const found = (await children(api, 'coordinator')).find((c) => c.label === 'translator');
    return found !== undefined && (scripted === undefined || scripted.requests.some((r) => isHeld(r.body))) ? found : undefined;
  });
  await say(api, 'Ask the translator for one more phrase.');
  await until('the second task is queued behind the open turn', async () => {
    const [root, held] = [await view(api, 'coordinator'), await view(api, translator.id)];
    return root.status === 'idle' && (scripted === undefined || held.inbox.queued === 1) ? held : undefined;
  });

  const aborted = scripted?.nextAbandoned();
  const { interrupted } = (await api('POST', `/v1/agents/${translator.id}/interrupt`, {})) as { interrupted: string[] };
  console.log(`   POST /v1/agents/${translator.id}/interrupt {} → 202 ${JSON.stringify({ interrupted })}`);
  const requestAborted = aborted === undefined ? undefined : await within(aborted, 5_000);
  if (requestAborted !== undefined) console.log(`   the held model request ${requestAborted ? 'was aborted: its connection closed unanswered' : 'was NOT aborted'}`);
  // A calm of 0.3 s: nothing starts the queued task until a waking send.
  await pause(300);
  const [after, entries] = [await view(api, translator.id), await session(api, translator.id)];
  const lastEnd = entries.filter((e) => e.type === 'turn-end').at(-1)?.reason;
  const turns = entries.filter((e) => e.type === 'turn-start').length;
  console.log(`   translator [${after.status}]: turn-end ${lastEnd ?? 'missing'}; queued tasks ${after.inbox.queued}, and 0.3 s later still ${turns} turn started`);
  return { translatorId: translator.id, interrupted, requestAborted, lastEnd, queued: after.inbox.queued, turns };
}

/**
 * Wait until the coordinator's session shows `done` and the whole forest has nothing left to
 * do: every agent idle or settled, nothing queued or staged, for several polls in a row.
 */
async function quiet(api: Api, done: (coordinator: Entry[]) => boolean): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  let calm = 0;
  while (Date.now() < deadline) {
    const root = await view(api, 'coordinator');
    const kids = await children(api, 'coordinator');
    const still = [root, ...kids].every((v) => (v.status === 'idle' || v.status === 'settled' || v.status === 'closed') && v.inbox.queued === 0 && v.staged === 0);
    calm = still && done(await session(api, 'coordinator')) ? calm + 1 : 0;
    if (calm >= 3) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`the forest did not come to rest within ${deadlineMs / 1000} s`);
}

/** What the demo is meant to show, checked on the sessions it printed. */
function check(
  root: Node,
  lookup: PriceLookup,
  interrupt: Interrupted,
  compacted: Compacted,
  researcherSaw: ResearcherRequests | undefined,
  approvals: ApprovalRun,
  budget: [string, boolean][],
): boolean {
  const turnPrompts = new Set(root.entries.filter((e) => e.type === 'turn-start').map((e) => e.messageId));
  const reports = root.entries.filter((e) => e.source?.kind === 'subagent-report');
  const researcher = root.children.find((c) => c.view.label === 'researcher');
  const activations = researcher?.entries.filter((e) => e.type === 'activation').map((e) => e.event) ?? [];
  const translator = root.children.find((c) => c.view.id === interrupt.translatorId);
  const translatorTurns = translator === undefined ? [] : turns(translator.entries);
  const nodes = [root, ...root.children];
  const ends = nodes.flatMap((n) => n.entries.filter((e) => e.type === 'turn-end').map((e) => e.reason));
  const checks: [string, boolean][] = [
    ['three continuable children', root.children.length === 3 && root.children.every((c) => c.view.mode === 'continuable')],
    ['the first report arrived quietly: no coordinator turn started for it', reports[0] !== undefined && !turnPrompts.has(reports[0].messageId)],
    ['the later reports each woke the coordinator for a turn', reports.length >= 5 && reports.slice(1).every((r) => turnPrompts.has(r.messageId))],
    ...lookupChecks(lookup),
    ['the researcher was cold-resumed for the follow-up', activations.includes('resumed')],
    ...compactionChecks(researcher, compacted, researcherSaw, FOLLOW_UP),
    [
      "the interrupt ended the translator's open turn cancelled and aborted its held model request",
      JSON.stringify(interrupt.interrupted) === JSON.stringify([interrupt.translatorId]) && interrupt.lastEnd === 'cancelled' && interrupt.requestAborted !== false,
    ],
    [
      'the queued task waited through the interrupt, then ran first once the next message woke the translator',
      interrupt.queued === 1 &&
        interrupt.turns === 1 &&
        JSON.stringify(translatorTurns) === JSON.stringify([`${HELD_TASK} cancelled`, `${QUEUED_TASK} completed`, `${WAKING_TASK} completed`]),
    ],
    ['every other turn completed', ends.filter((r) => r === 'cancelled').length === 1 && ends.filter((r) => r !== 'completed').length === 1],
    ['token usage recorded for every model answer', nodes.every((n) => n.entries.filter((e) => e.role === 'assistant').every((e) => e.usage !== undefined))],
    ...approvalChecks(approvals),
    ...budget,
  ];
  console.log('\nchecks:');
  for (const [what, passed] of checks) console.log(`  ${passed ? 'ok  ' : 'FAIL'} ${what}`);
  return checks.every(([, passed]) => passed);
}

/** Each turn of a session as "<its prompt> <how it ended>", in order. */
function turns(entries: Entry[]): string[] {
  return entries
    .filter((e) => e.type === 'turn-start')
    .map((start) => {
      const prompt = entries.find((e) => e.type === 'message' && e.messageId === start.messageId);
      const end = entries.find((e) => e.type === 'turn-end' && e.seq > start.seq);
      return `${(prompt?.content ?? []).map((b) => b.text).join(' ')} ${end?.reason ?? 'open'}`;
    });
}

/** The service on PORT=0, its log in a file; resolves once it logs its URL. */
async function startService(dir: string): Promise<{ url: string; stop: () => Promise<void> }> {
  const log = createWriteStream(join(dir, 'service.log'));
  // DEMO_FROM_SOURCE=1 (the test of this demo) runs the sources through tsx instead of the build.
  const entry = process.env.DEMO_FROM_SOURCE === '1' ? ['--import', 'tsx', 'src/server.ts'] : ['dist/server.js'];
  const child: ChildProcess = spawn(process.execPath, entry, {
    env: { ...process.env, HOST: '127.0.0.1', PORT: '0', AGENTFOREST_DATA: join(dir, 'demo.db'), LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stderr!.pipe(log);
  const url = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      log.write(`${line}\n`);
      const found = /"url":"(http:\/\/[^"]+)"/.exec(line);
      if (found !== null && line.includes('listening')) resolve(found[1]!);
    });
    child.once('exit', (code) => reject(new Error(`the service exited (${code}) before listening; see ${join(dir, 'service.log')}`)));
  });
  return {
    url,
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
      log.end();
    },
  };
}

main().catch((error: unknown) => {
  console.error(`demo failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
});
