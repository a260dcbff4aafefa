/**
 * The demo's MCP tool: the operator registers the demo's own server (mcp-server.ts) as
 * `prices` and creates the coordinator with a grant of `mcp__prices__*`, which its subagents
 * inherit. The budget subagent calls `mcp__prices__trip_cost` and reports what it answered.
 * This module shows and checks that call from three sides: the budget subagent's session (the
 * call, its effect key, its result), what the server saw (the same key, in `_meta` and as the
 * `Idempotency-Key` header, and what it answered), and the report in the coordinator's session.
 */
import { PRICES_INPUT, PRICES_TOOL } from './demo-model.js';
import { children, session, type Api, type Entry } from './forest.js';
import type { McpDemoServer, SeenCall } from './mcp-server.js';

export const TOOL_SERVER = 'prices';
/** The coordinator's grants: the service's own tools (the default for a root) and every tool of `prices`. */
export const COORDINATOR_TOOLS = ['spawn_subagent', 'subagent-control', `mcp__${TOOL_SERVER}__*`];

interface ToolServerView {
  name: string;
  state: string;
  error?: string;
  tools: { name: string; description?: string }[];
}

/** The budget subagent's call as its session and the server saw it. */
export interface PriceLookup {
  registered: ToolServerView;
  /** The tools the coordinator may call, as `GET /v1/agents/coordinator/grants` answered. */
  effective: string[];
  /** The calls of PRICES_TOOL in the budget subagent's session, with their effect keys. */
  calls: { id: string; input: unknown; effectKey?: string }[];
  /** The result the budget subagent's model read for the first of them. */
  result: Entry | undefined;
  /** What the server saw. */
  seen: SeenCall[];
  /** The budget subagent's report, as the coordinator's session has it. */
  report: string | undefined;
}

/** Register the demo's MCP server with the service, as the operator. */
export async function registerToolServer(api: Api, server: McpDemoServer): Promise<ToolServerView> {
  const view = (await api('PUT', `/v1/tool-servers/${TOOL_SERVER}`, { url: server.url })) as ToolServerView;
  const tools = view.tools.map((t) => `${t.name} (${t.description ?? ''})`).join(', ');
  console.log(`   PUT /v1/tool-servers/${TOOL_SERVER} {"url":"${server.url}"} → 200 ${view.name} [${view.state}]${view.error === undefined ? '' : ` ${view.error}`}`);
  console.log(`   its tools: ${tools === '' ? 'none' : tools}`);
  return view;
}

/** The coordinator's effective tools, printed after its creation. */
export async function coordinatorTools(api: Api): Promise<string[]> {
  const grants = (await api('GET', '/v1/agents/coordinator/grants')) as { grants: string[]; effective: string[] };
  console.log(`   POST /v1/agents {"id":"coordinator","tools":${JSON.stringify(COORDINATOR_TOOLS)},…} → 201`);
  console.log(`   GET /v1/agents/coordinator/grants → 200 ${JSON.stringify(grants)}`);
  return grants.effective;
}

/** After step 2: the budget subagent's call of the prices tool, printed from its session and the server's record. */
export async function priceLookup(api: Api, server: McpDemoServer, registered: ToolServerView, effective: string[]): Promise<PriceLookup> {
  const budget = (await children(api, 'coordinator')).find((c) => c.label === 'budget');
  const entries = budget === undefined ? [] : await session(api, budget.id);
  const calls = entries.flatMap((e) => (e.role === 'assistant' ? (e.toolCalls ?? []) : [])).filter((c) => c.name === PRICES_TOOL);
  const result = entries.find((e) => e.role === 'tool' && calls[0] !== undefined && e.toolCallId === calls[0].id);
  const report = (await session(api, 'coordinator'))
    .filter((e) => e.source?.kind === 'subagent-report' && budget !== undefined && e.source.senderSessionId === budget.id)
    .map(text)
    .at(0);
  const lookup: PriceLookup = { registered, effective, calls, result, seen: [...server.calls], report };

  const [first, seen] = [calls[0], lookup.seen[0]];
  if (first === undefined || seen === undefined) {
    console.log(`   the budget subagent made ${calls.length} calls of ${PRICES_TOOL}; the ${TOOL_SERVER} server saw ${lookup.seen.length}`);
    return lookup;
  }
  const same = seen.metaKey === first.effectKey && seen.headerKey === first.effectKey;
  const read = result === undefined ? 'no result' : `${result.isError === true ? 'the error' : 'the result'} ${JSON.stringify(text(result))}`;
  console.log(`   budget subagent → ${PRICES_TOOL} ${JSON.stringify(first.input)}; effect key in its session ${first.effectKey}`);
  console.log(`   ${TOOL_SERVER} server got ${seen.tool} ${JSON.stringify(seen.input)}; effect key in _meta ${seen.metaKey}, Idempotency-Key ${seen.headerKey}`);
  console.log(`      ${same ? "both the session's key" : "NOT the session's key"}; it answered ${JSON.stringify(seen.answer)}`);
  console.log(`   budget subagent read ${read}`);
  console.log(`   coordinator's session: report ${JSON.stringify(report ?? 'missing')}`);
  return lookup;
}

/** What the demo's MCP part should show. */
export function lookupChecks(lookup: PriceLookup): [string, boolean][] {
  const [first, seen] = [lookup.calls[0], lookup.seen[0]];
  const read = lookup.result === undefined ? undefined : text(lookup.result);
  return [
    [
      `the demo's MCP server was registered ready with its tool, and the coordinator's grant let it call ${PRICES_TOOL}`,
      lookup.registered.state === 'ready' && lookup.registered.tools.some((t) => `mcp__${TOOL_SERVER}__${t.name}` === PRICES_TOOL) && lookup.effective.includes(PRICES_TOOL),
    ],
    [
      `the budget subagent called ${PRICES_TOOL} once, the server answered it, and the subagent read that answer`,
      lookup.calls.length === 1 &&
        lookup.seen.length === 1 &&
        JSON.stringify(seen?.input) === JSON.stringify(PRICES_INPUT) &&
        seen?.isError === false &&
        lookup.result?.isError !== true &&
        read === seen.answer,
    ],
    [
      "the server saw the call's effect key, in _meta and as Idempotency-Key: the key in the budget subagent's session",
      first?.effectKey !== undefined && /^ek_/.test(first.effectKey) && seen?.metaKey === first.effectKey && seen.headerKey === first.effectKey,
    ],
    ["the budget subagent's report reached the coordinator, carrying what the tool said", seen !== undefined && (lookup.report ?? '').includes(seen.answer)],
  ];
}

function text(entry: Entry): string {
  return (entry.content ?? []).map((b) => b.text).join(' ');
}
