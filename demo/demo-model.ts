/**
 * The demo's scripted model: deterministic answers that play a coordinator and its two
 * researchers. It reads the conversation the way a model would (what the last message is)
 * and answers with the same tools a real model is offered.
 */
import { call, hasTool, lastMessage, type ChatRequest, type Reply } from './scripted-model.js';

const SIGHTS = 'Sights: Belém Tower, the Alfama quarter, LX Factory.';
const BUDGET = 'Budget: about 420 EUR for two nights, food and transport included.';
const FREE = 'Free: the Alfama quarter and LX Factory; Belém Tower costs 10 EUR.';

export function demoModel(request: ChatRequest): Reply {
  const last = lastMessage(request);
  if (last === undefined) return { answer: { content: 'Nothing to do.' } };
  const text = last.content ?? '';
  if (hasTool(request, 'report')) return child(last.role, text);
  return coordinator(request, last.role, text);
}

/** A subagent: answer its task with one report, then say it is done. */
function child(role: string, text: string): Reply {
  if (role === 'tool') return { answer: { content: 'Reported to the coordinator.' } };
  const output = /free/i.test(text) ? FREE : /cost|budget/i.test(text) ? BUDGET : SIGHTS;
  return { answer: { toolCalls: [call('report', { output })] } };
}

function coordinator(request: ChatRequest, role: string, text: string): Reply {
  if (role === 'tool') {
    if (text.startsWith('started background subagent')) return { answer: { content: 'Started it; its findings will arrive as a report.' } };
    if (text.startsWith('message queued')) return { answer: { content: 'Asked the researcher a follow-up question.' } };
    return { answer: { content: 'Noted.' } };
  }
  if (/start a researcher/i.test(text)) {
    return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'List three sights in Lisbon worth a weekend.', label: 'researcher' })] } };
  }
  if (/start a budget/i.test(text)) {
    return { answer: { toolCalls: [call('spawn_subagent', { prompt: 'Estimate the cost of a weekend in Lisbon.', label: 'budget' })] } };
  }
  if (text.includes(BUDGET)) {
    const researcher = spawnedId(request, 'researcher');
    if (researcher === undefined) return { answer: { content: 'I cannot find the researcher.' } };
    return { answer: { toolCalls: [call('send_message', { subagent_id: researcher, message: 'Which of those sights are free?' })] } };
  }
  if (text.includes(FREE)) return { answer: { content: `Plan: ${SIGHTS} ${BUDGET} ${FREE}` } };
  if (text.includes(SIGHTS)) return { answer: { content: 'Noted the sights.' } };
  return { answer: { content: 'Nothing to do.' } };
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
