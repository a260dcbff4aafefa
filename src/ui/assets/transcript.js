/**
 * A session entry as a readable transcript block: turns and steps as dividers, messages with
 * who said them (a report names its child), tool calls with their arguments, tool results
 * under the call's name, turn ends with their reason, a call's wait for a person and how it
 * ended. Each block keeps its raw JSON one click away. Text is shown as text, never as markup.
 */
import { el } from './dom.js';
import { clock, contentText, dollars } from './format.js';

/**
 * @typedef {{ nameOf: (id: string) => string, toolNames: Map<string, string>, onSelect: (id: string) => void }} TranscriptContext
 * toolNames: the name of each tool call seen so far, by call id (filled as entries render)
 */

/**
 * @param {any} entry a SessionEntry
 * @param {TranscriptContext} ctx
 * @returns {HTMLElement}
 */
export function renderEntry(entry, ctx) {
  const block = el('li', { class: `entry ${entry.type}`, dataset: { seq: String(entry.seq), type: entry.type } });
  block.append(el('span', { class: 'seq', text: `#${entry.seq}` }), ...body(entry, ctx), rawToggle(entry));
  if (entry.type === 'message') block.classList.add(`role-${entry.role}`, `source-${entry.source?.kind ?? 'none'}`);
  if (entry.isError === true || (entry.type === 'turn-end' && entry.reason === 'failed')) block.classList.add('error');
  return block;
}

function body(entry, ctx) {
  const at = el('time', { datetime: entry.at, text: clock(entry.at) });
  switch (entry.type) {
    case 'turn-start':
      return [el('div', { class: 'divider', title: `turn ${entry.turnId}` }, el('span', { text: 'Turn started' }), at)];
    case 'step-start':
      return [el('div', { class: 'step', title: `step ${entry.stepId}` }, el('span', { text: `Step ${entry.index + 1}${entry.attempt === undefined ? '' : ` (attempt ${entry.attempt})`}` }), at)];
    case 'turn-end':
      return [
        el('div', { class: 'divider', title: `turn ${entry.turnId}` }, el('span', { text: `Turn ${entry.reason}` }), at),
        entry.error === undefined ? null : el('div', { class: 'text', text: entry.error }),
      ].filter(Boolean);
    case 'activation':
      return [el('div', { class: 'note' }, el('span', { text: `Activation ${entry.event}` }), at)];
    case 'compaction':
      return [
        el('div', { class: 'note' }, el('span', { text: `Compacted: a summary stands for #1–#${entry.throughSeq}` }), at),
        el('details', { class: 'summary-text' }, el('summary', { text: 'Summary' }), el('div', { class: 'text', text: entry.summary })),
      ];
    case 'budget':
      return [el('div', { class: 'note' }, el('span', { text: `Budget: ${budgetText(entry.budget)}` }), at)];
    case 'approval':
      return [el('div', { class: 'note', title: entry.approval?.id }, el('span', { text: approvalText(entry.approval ?? {}) }), at)];
    case 'message':
      return message(entry, ctx, at);
    default:
      return [el('div', { class: 'note' }, el('span', { text: entry.type }), at)];
  }
}

function message(entry, ctx, at) {
  const out = [el('div', { class: 'who' }, ...speaker(entry, ctx), at)];
  const text = contentText(entry.content);
  if (text !== '') out.push(el('div', { class: 'text', text: entry.source?.kind === 'subagent-report' || entry.source?.kind === 'subagent-notice' ? text.split('\n').slice(1).join('\n') : text }));
  for (const call of entry.toolCalls ?? []) {
    ctx.toolNames.set(call.id, call.name);
    out.push(el('div', { class: 'tool-call', dataset: { toolCallId: call.id } }, el('div', { class: 'tool-name', text: `→ ${call.name}` }), el('pre', { class: 'args', text: pretty(call.input) })));
  }
  if (entry.usage !== undefined) {
    const u = entry.usage;
    out.push(el('div', { class: 'usage', text: `${u.promptTokens} prompt + ${u.completionTokens} completion tokens${u.costMicroUsd === undefined ? '' : ` · ${dollars(u.costMicroUsd)}`}` }));
  }
  return out;
}

function speaker(entry, ctx) {
  const from = entry.source?.senderSessionId;
  const link = (id) => el('button', { class: 'link', type: 'button', text: ctx.nameOf(id), onclick: () => ctx.onSelect(id) });
  switch (entry.source?.kind) {
    case 'subagent-report':
      return [el('span', { class: 'role', text: 'Report from ' }), link(from ?? '')];
    case 'subagent-notice':
      return [el('span', { class: 'role', text: 'Notice about ' }), link(from ?? '')];
    case 'coordinator':
      return from === undefined ? [el('span', { class: 'role', text: 'Parent' })] : [el('span', { class: 'role', text: 'Parent ' }), link(from)];
    default:
      break;
  }
  if (entry.role === 'assistant') return [el('span', { class: 'role', text: 'Assistant' })];
  if (entry.role === 'tool') {
    const name = ctx.toolNames.get(entry.toolCallId ?? '');
    return [el('span', { class: 'role', text: `${entry.isError === true ? 'Tool error' : 'Tool result'}${name === undefined ? '' : `: ${name}`}` })];
  }
  return [el('span', { class: 'role', text: 'User' })];
}

/** The entry's JSON, built when first opened. */
function rawToggle(entry) {
  const pre = el('pre', { class: 'raw-json' });
  const details = el('details', { class: 'raw' }, el('summary', { text: 'JSON' }), pre);
  details.addEventListener('toggle', () => {
    if (details.open && pre.textContent === '') pre.textContent = JSON.stringify(entry, null, 2);
  });
  return details;
}

/** Tool arguments: JSON indented; a string that holds JSON is shown parsed. */
function pretty(input) {
  if (typeof input === 'string') {
    try {
      return JSON.stringify(JSON.parse(input), null, 2);
    } catch {
      // Not JSON: shown as the string it is.
      return input;
    }
  }
  return JSON.stringify(input, null, 2) ?? '';
}

/** What became of a call that waited for a person. */
function approvalText({ state, tool, reason }) {
  const why = reason === undefined || reason === '' ? '' : `: ${reason}`;
  switch (state) {
    case 'pending':
      return `${tool} waits for a person's approval`;
    case 'approved':
      return `A person approved ${tool}${why}`;
    case 'denied':
      return `A person denied ${tool}${why}`;
    case 'expired':
      return `No one decided on ${tool} in time`;
    default:
      return `The wait for a person on ${tool} was ${state}`;
  }
}

function budgetText(budget) {
  const parts = [];
  if (budget?.steps !== undefined) parts.push(`${budget.steps} steps`);
  if (budget?.tokens !== undefined) parts.push(`${budget.tokens} tokens`);
  if (budget?.costMicroUsd !== undefined) parts.push(dollars(budget.costMicroUsd));
  return parts.length === 0 ? 'no limits' : parts.join(' · ');
}
