/**
 * `npm run demo`: a whole forest, driven by the service's built-in model driver.
 *
 * Starts the service (dist/server.js) on a temporary SQLite file and, unless DEMO_MODEL_URL
 * names a real endpoint, a deterministic scripted chat-completions server on 127.0.0.1. Then:
 * a coordinator root spawns a researcher (its report arrives quietly), the report delivery is
 * switched to wakeup, the coordinator spawns a budget subagent whose report wakes it, it sends
 * the settled researcher a follow-up (a cold resume), whose report wakes it once more. Prints
 * the forest as a tree with every session's messages, and checks what it should show.
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
import { demoModel } from './demo-model.js';
import { ScriptedModelServer } from './scripted-model.js';

interface Entry {
  seq: number;
  type: string;
  role?: string;
  content?: { text: string }[];
  source?: { kind: string; senderSessionId?: string };
  toolCalls?: { id: string; name: string; input: unknown }[];
  isError?: boolean;
  usage?: { totalTokens: number };
  messageId?: string;
  reason?: string;
  error?: string;
  event?: string;
}

interface View {
  id: string;
  kind: string;
  label?: string;
  status: string;
  mode: string | null;
  inbox: { queued: number };
  staged: number;
}

const realUrl = process.env.DEMO_MODEL_URL;
const deadlineMs = realUrl === undefined ? 30_000 : 300_000;

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'agentforest-demo-'));
  const scripted = realUrl === undefined ? await ScriptedModelServer.start((request) => demoModel(request)) : undefined;
  const model = {
    provider: 'openai-compatible',
    baseUrl: realUrl ?? scripted!.url,
    model: process.env.DEMO_MODEL ?? (realUrl === undefined ? 'scripted-demo' : realUrl.includes('openai.com') ? 'gpt-4o-mini' : 'deepseek-chat'),
    ...(process.env.DEMO_API_KEY === undefined ? {} : { apiKeyEnv: 'DEMO_API_KEY' }),
    maxSteps: 8,
  };
  const service = await startService(dir);
  const api = client(service.url);
  let ok = false;
  try {
    console.log(`service   ${service.url}  (SQLite file ${join(dir, 'demo.db')}, log ${join(dir, 'service.log')})`);
    console.log(`model     ${model.baseUrl}  ${model.model}${scripted === undefined ? '' : '  (scripted, deterministic)'}\n`);

    await api('PUT', '/v1/packages/subagent-report', { config: { reportDelivery: 'quiet' } });
    await api('POST', '/v1/agents', {
      id: 'coordinator',
      instructions:
        'You coordinate background subagents to plan a weekend trip. Start subagents with spawn_subagent (give each a label), ' +
        'give a settled subagent more work with send_message, and answer briefly. Subagents deliver findings with their report tool.',
      model,
    });
    step('1. the coordinator starts a researcher; its report arrives quietly (no coordinator turn)');
    await api('POST', '/v1/agents/coordinator/messages', { content: 'Plan a weekend in Lisbon. Start a researcher subagent for the sights.', delivery: 'followup' });
    await quiet(api, (s) => s.some((e) => e.source?.kind === 'subagent-report'));

    step('2. report delivery switches to wakeup; the coordinator starts a budget subagent, whose report wakes it,');
    step('   and it sends the settled researcher a follow-up (cold resume), whose report wakes it again');
    await api('PUT', '/v1/packages/subagent-report', { config: { reportDelivery: 'wakeup' } });
    await api('POST', '/v1/agents/coordinator/messages', { content: 'Now start a budget subagent for the costs.', delivery: 'followup' });
    await quiet(api, (s) => s.filter((e) => e.source?.kind === 'subagent-report').length >= 3);

    console.log('\nthe forest:\n');
    const tree = await printTree(api, 'coordinator');
    ok = check(tree);
  } finally {
    await service.stop();
    await scripted?.close();
    if (process.env.DEMO_KEEP === undefined) await rm(dir, { recursive: true, force: true });
    else console.log(`\nkept ${dir}`);
  }
  process.exitCode = ok || realUrl !== undefined ? 0 : 1;
}

function step(text: string): void {
  console.log(`== ${text}`);
}

type Api = (method: string, path: string, body?: unknown) => Promise<unknown>;

function client(base: string): Api {
  return async (method, path, body) => {
    const response = await fetch(`${base}${path}`, {
      method,
      ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`${method} ${path} answered ${response.status}: ${text}`);
    return text === '' ? undefined : (JSON.parse(text) as unknown);
  };
}

async function session(api: Api, id: string): Promise<Entry[]> {
  const entries: Entry[] = [];
  let after = 0;
  for (;;) {
    const page = (await api('GET', `/v1/agents/${id}/session?after=${after}&limit=1000`)) as { entries: Entry[]; nextAfter: number | null };
    entries.push(...page.entries);
    if (page.nextAfter === null) return entries;
    after = page.nextAfter;
  }
}

async function children(api: Api, id: string): Promise<View[]> {
  return ((await api('GET', `/v1/agents?parentId=${encodeURIComponent(id)}`)) as { items: View[] }).items;
}

/**
 * Wait until the coordinator's session shows `done` and the whole forest has nothing left to
 * do: every agent idle or settled, nothing queued or staged, for several polls in a row.
 */
async function quiet(api: Api, done: (coordinator: Entry[]) => boolean): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  let calm = 0;
  while (Date.now() < deadline) {
    const root = (await api('GET', '/v1/agents/coordinator')) as View;
    const kids = await children(api, 'coordinator');
    const still = [root, ...kids].every((v) => (v.status === 'idle' || v.status === 'settled' || v.status === 'closed') && v.inbox.queued === 0 && v.staged === 0);
    calm = still && done(await session(api, 'coordinator')) ? calm + 1 : 0;
    if (calm >= 3) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`the forest did not come to rest within ${deadlineMs / 1000} s`);
}

interface Node {
  view: View;
  entries: Entry[];
  children: Node[];
}

async function printTree(api: Api, rootId: string): Promise<Node> {
  return printNode(api, (await api('GET', `/v1/agents/${rootId}`)) as View, '');
}

async function printNode(api: Api, view: View, indent: string): Promise<Node> {
  const entries = await session(api, view.id);
  const name = view.label === undefined ? view.id : `${view.label} (${view.id})`;
  console.log(`${indent}${view.kind === 'root' ? 'root' : 'child'} ${name}  [${view.status}]`);
  for (const entry of entries) {
    const line = describe(entry);
    if (line !== undefined) console.log(`${indent}  │ ${line}`);
  }
  const node: Node = { view, entries, children: [] };
  for (const child of await children(api, view.id)) {
    console.log(`${indent}  │`);
    node.children.push(await printNode(api, child, `${indent}  `));
  }
  return node;
}

function describe(entry: Entry): string | undefined {
  const text = (entry.content ?? []).map((b) => b.text).join(' ');
  const short = (s: string): string => (s.length > 110 ? `${s.slice(0, 110)}…` : s);
  switch (entry.type) {
    case 'turn-start':
      return '── turn ──';
    case 'turn-end':
      return `── turn ${entry.reason}${entry.error === undefined ? '' : `: ${entry.error}`} ──`;
    case 'activation':
      return `(activation ${entry.event})`;
    case 'message': {
      if (entry.role === 'assistant') {
        const calls = (entry.toolCalls ?? []).map((c) => `${c.name} ${JSON.stringify(c.input)}`).join('; ');
        const tokens = entry.usage === undefined ? '' : `  [${entry.usage.totalTokens} tokens]`;
        return short(`model: ${[text, calls].filter((s) => s !== '').join(' → ')}`) + tokens;
      }
      if (entry.role === 'tool') return short(`${entry.isError === true ? 'tool error' : 'tool'}: ${text}`);
      const from = entry.source?.kind === 'subagent-report' ? 'report' : entry.source?.kind === 'coordinator' ? 'parent' : 'operator';
      return short(`${from}: ${text}`);
    }
    default:
      return undefined;
  }
}

/** What the demo is meant to show, checked on the sessions it printed. */
function check(root: Node): boolean {
  const turnPrompts = new Set(root.entries.filter((e) => e.type === 'turn-start').map((e) => (e as { messageId?: string }).messageId));
  const reports = root.entries.filter((e) => e.source?.kind === 'subagent-report');
  const researcher = root.children.find((c) => c.view.label === 'researcher');
  const activations = researcher?.entries.filter((e) => e.type === 'activation').map((e) => e.event) ?? [];
  const checks: [string, boolean][] = [
    ['two continuable children', root.children.length === 2 && root.children.every((c) => c.view.mode === 'continuable')],
    ['the first report arrived quietly: no coordinator turn started for it', reports[0] !== undefined && !turnPrompts.has(reports[0].messageId)],
    ['the later reports each woke the coordinator for a turn', reports.length >= 3 && reports.slice(1).every((r) => turnPrompts.has(r.messageId))],
    ['the researcher was cold-resumed for the follow-up', activations.includes('resumed')],
    ['every turn completed', [root, ...root.children].every((n) => n.entries.filter((e) => e.type === 'turn-end').every((e) => e.reason === 'completed'))],
    ['token usage recorded for every model answer', [root, ...root.children].every((n) => n.entries.filter((e) => e.role === 'assistant').every((e) => e.usage !== undefined))],
  ];
  console.log('\nchecks:');
  for (const [what, passed] of checks) console.log(`  ${passed ? 'ok  ' : 'FAIL'} ${what}`);
  return checks.every(([, passed]) => passed);
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
