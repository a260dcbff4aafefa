/**
 * Rendering a session log as one chat-completions request: the system message, the message
 * entries in log order, and the tool list.
 */
import { describe, it, expect } from 'vitest';
import { createUserMessage, type Message } from '../../src/domain/message.js';
import { messageEntry, type EntryBody, type SessionEntry } from '../../src/domain/session.js';
import { renderMessages, renderTools } from '../../src/domain/step-render.js';
import {
  admit,
  closeTurn,
  deliver,
  initialState,
  recordOutput,
  recordToolResult,
  startStep,
  type AgentState,
  type Transition,
} from '../../src/domain/turn-machine.js';

const AT = '2026-01-01T00:00:00.000Z';

function numbered(bodies: readonly EntryBody[]): SessionEntry[] {
  return bodies.map((body, i) => ({ ...body, seq: i + 1 }));
}

function log(...messages: Message[]): SessionEntry[] {
  return numbered(messages.map((m) => messageEntry(m, AT)));
}

function assistant(id: string, text: string, calls: Message['toolCalls'] = undefined): Message {
  const message: Message = { id, role: 'assistant', content: text === '' ? [] : [{ type: 'text', text }], source: { kind: 'model' } };
  if (calls !== undefined) message.toolCalls = calls;
  return message;
}

function tool(id: string, toolCallId: string, text: string): Message {
  return { id, role: 'tool', content: [{ type: 'text', text }], source: { kind: 'tool' }, toolCallId };
}

describe('renderMessages', () => {
  it('instructions become the leading system message', () => {
    expect(renderMessages('Be brief.', log(createUserMessage('m-1', 'hi')))).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'hi' },
    ]);
  });

  it('the system message is omitted when instructions are absent or empty', () => {
    const entries = log(createUserMessage('m-1', 'hi'));
    expect(renderMessages(undefined, entries)).toEqual([{ role: 'user', content: 'hi' }]);
    expect(renderMessages('', entries)).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it('an empty log with no instructions renders no messages', () => {
    expect(renderMessages(undefined, [])).toEqual([]);
  });

  it('a user message with several text blocks is one user message joined with a newline', () => {
    const report = createUserMessage(
      'm-1',
      [
        { type: 'text', text: 'Background subagent child-1 reported:' },
        { type: 'text', text: 'found 3 files' },
      ],
      { kind: 'subagent-report', senderSessionId: 'child-1' },
    );
    expect(renderMessages(undefined, log(report))).toEqual([
      { role: 'user', content: 'Background subagent child-1 reported:\nfound 3 files' },
    ]);
  });

  it('an assistant tool call carries its input as JSON text and null content when it has no text', () => {
    const calls = [
      { id: 'call-1', name: 'search', input: { query: 'x', limit: 2 } },
      { id: 'call-2', name: 'list', input: [1, 'two'] },
    ];
    expect(renderMessages(undefined, log(assistant('m-1', '', calls)))).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call-1', type: 'function', function: { name: 'search', arguments: '{"query":"x","limit":2}' } },
          { id: 'call-2', type: 'function', function: { name: 'list', arguments: '[1,"two"]' } },
        ],
      },
    ]);
  });

  it('a tool call without input is rendered with empty-object arguments', () => {
    const rendered = renderMessages(undefined, log(assistant('m-1', '', [{ id: 'call-1', name: 'ping', input: undefined }])));
    expect(rendered).toEqual([
      { role: 'assistant', content: null, tool_calls: [{ id: 'call-1', type: 'function', function: { name: 'ping', arguments: '{}' } }] },
    ]);
    const args = rendered[0]?.role === 'assistant' ? rendered[0].tool_calls?.[0]?.function.arguments : undefined;
    expect(JSON.parse(args ?? 'not json')).toEqual({});
  });

  it('an assistant message with text and tool calls keeps its text', () => {
    const rendered = renderMessages(undefined, log(assistant('m-1', 'let me look', [{ id: 'c-1', name: 'search', input: {} }])));
    expect(rendered).toEqual([
      { role: 'assistant', content: 'let me look', tool_calls: [{ id: 'c-1', type: 'function', function: { name: 'search', arguments: '{}' } }] },
    ]);
  });

  it('an assistant answer without tool calls has text content and no tool_calls key', () => {
    const rendered = renderMessages(undefined, log(assistant('m-1', 'done')));
    expect(rendered).toEqual([{ role: 'assistant', content: 'done' }]);
    expect(rendered[0]).not.toHaveProperty('tool_calls');
  });

  it('a tool result becomes a tool message with its tool_call_id', () => {
    expect(renderMessages(undefined, log(tool('m-1', 'call-7', 'result text')))).toEqual([
      { role: 'tool', tool_call_id: 'call-7', content: 'result text' },
    ]);
  });

  it('turn, step and activation entries are skipped and messages keep log order', () => {
    const entries = numbered([
      { type: 'activation', at: AT, activationId: 'a-1', event: 'created' },
      { type: 'turn-start', at: AT, turnId: 't-1', inboxItemId: 'i-1', messageId: 'm-1' },
      messageEntry(createUserMessage('m-1', 'first'), AT),
      { type: 'step-start', at: AT, turnId: 't-1', stepId: 's-1', index: 0 },
      messageEntry(assistant('m-2', 'second'), AT),
      { type: 'turn-end', at: AT, turnId: 't-1', reason: 'completed' },
      messageEntry(createUserMessage('m-3', 'third'), AT),
    ]);
    expect(renderMessages('sys', entries)).toEqual([
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'second' },
      { role: 'user', content: 'third' },
    ]);
  });

  it('a log written by the turn machine renders as a valid tool-call exchange', () => {
    let state: AgentState = initialState();
    const bodies: EntryBody[] = [];
    const apply = (op: (s: AgentState) => Transition): void => {
      const t = op(state);
      state = t.state;
      for (const e of t.effects) if (e.kind === 'append') bodies.push(e.entry);
    };
    apply((s) => deliver(s, { delivery: 'followup', message: createUserMessage('m-1', 'what is in x?'), inboxItemId: 'i-1' }, AT));
    apply((s) => admit(s, 't-1', AT));
    apply((s) => startStep(s, 's-1', AT));
    apply((s) => deliver(s, { delivery: 'inject', message: createUserMessage('m-2', 'note') }, AT));
    apply((s) => recordOutput(s, 's-1', assistant('m-3', '', [{ id: 'c-1', name: 'read', input: { path: 'x' } }]), AT));
    apply((s) => recordToolResult(s, 's-1', tool('m-4', 'c-1', 'contents'), AT));
    apply((s) => startStep(s, 's-2', AT));
    apply((s) => recordOutput(s, 's-2', assistant('m-5', 'x holds contents'), AT));
    apply((s) => closeTurn(s, AT));

    expect(renderMessages('You read files.', numbered(bodies))).toEqual([
      { role: 'system', content: 'You read files.' },
      { role: 'user', content: 'what is in x?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c-1', type: 'function', function: { name: 'read', arguments: '{"path":"x"}' } }] },
      { role: 'tool', tool_call_id: 'c-1', content: 'contents' },
      { role: 'user', content: 'note' },
      { role: 'assistant', content: 'x holds contents' },
    ]);
  });
});

describe('renderTools', () => {
  it('each tool schema becomes a function tool with its input schema as parameters', () => {
    const inputSchema = { type: 'object', properties: { output: { type: 'string' } }, required: ['output'] };
    expect(
      renderTools([
        { name: 'report', description: 'Report to your parent.', inputSchema },
        { name: 'list_agents', description: 'List agents.', inputSchema: { type: 'object', properties: {} } },
      ]),
    ).toEqual([
      { type: 'function', function: { name: 'report', description: 'Report to your parent.', parameters: inputSchema } },
      { type: 'function', function: { name: 'list_agents', description: 'List agents.', parameters: { type: 'object', properties: {} } } },
    ]);
  });

  it('no tools render as an empty list', () => {
    expect(renderTools([])).toEqual([]);
  });
});
