/**
 * The demo's scripted model: deterministic answers that play a coordinator and its three
 * subagents. It reads the conversation the way a model would (what the last message is) and
 * answers with the same tools a real model is offered. The budget subagent asks the demo's MCP
 * server (mcp-server.ts) what the trip costs and reports what the tool said, read from its
 * result in the conversation; asked later to compare two cities, it calls that tool twice in one
 * step and reports both results (an approval rule makes each call wait for a person). The
 * translator's first task is held:
 * its request gets no answer until the service aborts it (the demo interrupts that turn).
 * The researcher's follow-up is asked only when the operator says so, so that the demo can
 * compact the settled researcher first.
 */
import { call, hasTool, lastMessage, type ChatRequest, type Reply } from './scripted-model.js';

const SIGHTS = 'Sights: Belém Tower, the Alfama quarter, LX Factory.';
const FREE = 'Free: the Alfama quarter and LX Factory; Belém Tower costs 10 EUR.';
const THANKS = "Phrase: 'obrigado' (a woman says 'obrigada') is thank you.";
const EVENING = "Phrase: 'boa noite' is good evening.";

/** The budget subagent's MCP tool: the demo's server is registered as `prices`. */
export const PRICES_TOOL = 'mcp__prices__trip_cost';
/** What the budget subagent asks it. */
export const PRICES_INPUT = { city: 'Lisbon', nights: 2 };
/** The budget subagent's report starts so; the rest is what the prices tool answered. */
const BUDGET = 'Budget: ';
/** The budget subagent's report as the coordinator reads it (the sender line, then the output). */
const REPORTED_BUDGET = new RegExp(`reported:\\s+(${BUDGET}.*)`);

/** The coordinator's follow-up to the settled budget subagent: two calls of the prices tool, which an approval rule holds for a person. */
export const COMPARE_TASK = 'What would 3 nights cost in Lisbon, and in Porto?';
/** The budget subagent's two calls for it, in this order. */
export const COMPARE_INPUTS = [
  { city: 'Lisbon', nights: 3 },
  { city: 'Porto', nights: 3 },
];
/** The budget subagent's report of the comparison starts so; then what each call's result said, in call order. */
export const COMPARED = 'Compared: ';
/** That report as the coordinator reads it. */
const REPORTED_COMPARISON = new RegExp(`reported:\\s+${COMPARED}`);

/** The researcher's first task, the prompt the coordinator spawns it with. */
export const RESEARCH_TASK = 'List three sights in Lisbon worth a weekend.';
/** The coordinator's follow-up to the settled researcher: it cold-resumes it. */
export const FOLLOW_UP = 'Which of those sights are free?';
/** The translator's first task: the model request that carries it is never answered. */
export const HELD_TASK = "Translate 'good morning' into Portuguese.";
/** Queued for the translator while its held turn is open; it waits through the interrupt. */
export const QUEUED_TASK = "Also translate 'thank you'.";
/** The coordinator's next message to the translator after the interrupt: the waking send. */
export const WAKING_TASK = "Go on: translate 'good evening' too.";

export function demoModel(request: ChatRequest): Reply {
  const last = lastMessage(request);
  if (last === undefined) return { answer: { content: 'Nothing to do.' } };
  const text = last.content ?? '';
  if (hasTool(request, 'report')) return child(request, last.role, text);
  return coordinator(request, last.role, text);
}

/** The held request, as the scripted server recorded it. */
export function isHeld(request: ChatRequest): boolean {
  return hasTool(request, 'report') && (lastMessage(request)?.content ?? '').includes(HELD_TASK);
}

/**
 * A subagent: answer its task with one report, then say it is done. The budget subagent first
 * calls the prices tool, and reports its result.
 */
function child(request: ChatRequest, role: string, text: string): Reply {
  if (role === 'tool') {
    if (answersCallOf(request, PRICES_TOOL)) {
      const results = lastResults(request);
      const output = results.length > 1 ? `${COMPARED}${results.join(' | ')}` : `${BUDGET}${text}`;
      return { answer: { toolCalls: [call('report', { output })] } };
    }
    return { answer: { content: 'Reported to the coordinator.' } };
  }
  if (text.includes(HELD_TASK)) return { hang: true };
  if (text.includes(COMPARE_TASK)) {
    if (hasTool(request, PRICES_TOOL)) return { answer: { toolCalls: COMPARE_INPUTS.map((input) => call(PRICES_TOOL, input)) } };
    return { answer: { toolCalls: [call('report', { output: `${COMPARED}unknown: I was not given ${PRICES_TOOL}.` })] } };
  }
  if (/cost|budget/i.test(text)) {
    if (hasTool(request, PRICES_TOOL)) return { answer: { toolCalls: [call(PRICES_TOOL, PRICES_INPUT)] } };
    return { answer: { toolCalls: [call('report', { output: `${BUDGET}unknown: I was not given ${PRICES_TOOL}.` })] } };
  }
  const output = /thank you/i.test(text) ? THANKS : /good evening/i.test(text) ? EVENING : /free/i.test(text) ? FREE : SIGHTS;
  return { answer: { toolCalls: [call('report', { output })] } };
}

/** The results of the last assistant message's calls, in call order. */
function lastResults(request: ChatRequest): string[] {
  const asked = request.messages.findLastIndex((m) => m.role === 'assistant');
  const calls = request.messages[asked]?.tool_calls ?? [];
  const results = request.messages.slice(asked + 1).filter((m) => m.role === 'tool');
  return calls.map((c) => results.find((m) => m.tool_call_id === c.id)?.content ?? 'no result');
}

/** True when the conversation ends with the result of a call to `tool`. */
function answersCallOf(request: ChatRequest, tool: string): boolean {
  const last = lastMessage(request);
  return request.messages.some((m) => m.tool_calls?.some((c) => c.id === last?.tool_call_id && c.function.name === tool));
}

function coordinator(request: ChatRequest, role: string, text: string): Reply {
  if (role === 'tool') {
    if (text.startsWith('started background subagent')) return { answer: { content: 'Started it; its findings will arrive as a report.' } };
    if (text.startsWith('message queued')) return { answer: { content: 'Sent the subagent its next task.' } };
    return { answer: { content: 'Noted.' } };
  }
  if (/start a researcher/i.test(text)) {
    return { answer: { toolCalls: [call('spawn_subagent', { prompt: RESEARCH_TASK, label: 'researcher' })] } };
  }
  if (/start a budget/i.test(text)) {
    return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'Estimate the cost of a weekend in Lisbon.', label: 'budget' })] } };
  }
  if (/start a translator/i.test(text)) return { answer: { toolCalls: [call('spawn_subagent', { prompt: HELD_TASK, label: 'translator' })] } };
  if (/ask the researcher/i.test(text)) return sendTo(request, 'researcher', FOLLOW_UP);
  if (/ask the translator/i.test(text)) return sendTo(request, 'translator', QUEUED_TASK);
  if (/ask the budget/i.test(text)) return sendTo(request, 'budget', COMPARE_TASK);
  if (/translator to go on/i.test(text)) return sendTo(request, 'translator', WAKING_TASK);
  if (REPORTED_BUDGET.test(text)) return { answer: { content: 'Noted the budget.' } };
  if (REPORTED_COMPARISON.test(text)) return { answer: { content: 'Noted the comparison.' } };
  if (text.includes(FREE)) return { answer: { content: `Plan: ${SIGHTS} ${reportedBudget(request)} ${FREE}` } };
  if (text.includes(SIGHTS)) return { answer: { content: 'Noted the sights.' } };
  if (text.includes(THANKS) || text.includes(EVENING)) return { answer: { content: 'Noted the phrase.' } };
  return { answer: { content: 'Nothing to do.' } };
}

/** The budget subagent's report, from the conversation. */
function reportedBudget(request: ChatRequest): string {
  const found = request.messages.map((m) => REPORTED_BUDGET.exec(m.content ?? '')?.[1]).find((b) => b !== undefined);
  return found ?? `${BUDGET}unknown.`;
}

/** send_message to the subagent started with this label. */
function sendTo(request: ChatRequest, label: string, message: string): Reply {
  const id = spawnedId(request, label);
  if (id === undefined) return { answer: { content: `I cannot find the ${label}.` } };
  return { answer: { toolCalls: [call('send_message', { subagent_id: id, message })] } };
}

/** The id spawn_subagent returned for the call with this label, from the conversation. */
function spawnedId(request: ChatRequest, label: string): string | undefined {
  for (const [i, message] of request.messages.entries()) {
    const spawn = message.tool_calls?.find((c) => c.function.name === 'spawn_subagent' && c.function.arguments.includes(`"label":"${label}"`));
    if (spawn === undefined) continue;
    const result = request.messages.slice(i + 1).find((m) => m.role === 'tool' && m.tool_call_id === spawn.id);
    const id = result?.content?.match(/subagent (\S+)/)?.[1];
    if (id !== undefined) return id;
  }
  return undefined;
}
