/**
 * A tool call is logged without the caller's own token: wherever the token occurs in the
 * call's input (a string value, an object key, an array item, at any depth), and only there.
 */
import { describe, expect, it } from 'vitest';
import type { ToolCall } from '../../src/domain/message.js';
import { loggableCall } from '../../src/steps/redaction.js';
import { mintToken } from '../../src/agents/tokens.js';

const token = mintToken();
const call = (input: unknown): ToolCall => ({ id: 'call-1', name: 'report', input });

describe('loggableCall', () => {
  it.each([
    ['a string', { output: 'a finding' }],
    ['nested values', { a: [1, true, null, { b: 'text', c: [2.5, 'x'] }] }],
    ['no input', undefined],
    ['a bare number', 42],
    ['a near miss of the token', { output: token.slice(0, -1) }],
  ])('returns the call itself when its input holds no token: %s', (_label, input) => {
    const original = call(input);
    expect(loggableCall(original, token)).toBe(original);
  });

  it.each([
    ['a string value', { output: `my token is ${token}.` }, { output: 'my token is [redacted].' }],
    ['a deep array item', { a: [{ b: ['x', token] }] }, { a: [{ b: ['x', '[redacted]'] }] }],
    ['an object key', { [`k-${token}`]: 1 }, { 'k-[redacted]': 1 }],
    ['twice in one string', { output: `${token}${token}` }, { output: '[redacted][redacted]' }],
    ['the input itself', token, '[redacted]'],
  ])('replaces the token in %s, leaving the original call as it was', (_label, input, expected) => {
    const original = call(structuredClone(input));
    const logged = loggableCall(original, token);
    expect(logged).toEqual({ ...original, input: expected });
    expect(original.input).toEqual(input);
  });

  it('ignores inherited properties, as the JSON text of the input does', () => {
    const input = Object.create({ inherited: token }) as Record<string, unknown>;
    input.own = 'clean';
    const original = call(input);
    expect(JSON.stringify(input)).not.toContain(token);
    expect(loggableCall(original, token)).toBe(original);
  });
});
