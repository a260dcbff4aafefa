/**
 * Agent tokens and operator keys: enough entropy, URL-safe, distinct; digest comparisons accept
 * the exact secret only.
 */
import { describe, expect, it } from 'vitest';
import { digest, matchesAny, matchesToken, mintToken } from '../../src/agents/tokens.js';

describe('mintToken', () => {
  it('gives a base64url token of 256 random bits', () => {
    const token = mintToken();

    expect(token).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(token.length).toBeGreaterThanOrEqual(43);
    expect(Buffer.from(token, 'base64url').length * 8).toBeGreaterThanOrEqual(256);
  });

  it('gives a different token on every call', () => {
    const tokens = Array.from({ length: 200 }, () => mintToken());

    expect(new Set(tokens).size).toBe(tokens.length);
  });
});

describe('matchesToken', () => {
  const secret = mintToken();

  it('accepts the exact secret', () => {
    expect(matchesToken(secret, secret)).toBe(true);
  });

  it('rejects an absent secret', () => {
    expect(matchesToken(undefined, secret)).toBe(false);
  });

  it.each([
    ['empty', ''],
    ['one character short', secret.slice(0, -1)],
    ['one character longer', `${secret}A`],
    ['last character changed', `${secret.slice(0, -1)}${secret.endsWith('A') ? 'B' : 'A'}`],
    ['first character changed', `${secret.startsWith('A') ? 'B' : 'A'}${secret.slice(1)}`],
    ['surrounded by spaces', ` ${secret} `],
    ['upper-cased', secret.toUpperCase() === secret ? secret.toLowerCase() : secret.toUpperCase()],
    ['same length, a character outside ASCII', `\u00e9${secret.slice(1)}`],
    ['same length, the first character as its low byte plus 256', `${String.fromCharCode(secret.charCodeAt(0) + 256)}${secret.slice(1)}`],
  ])('rejects a near miss: %s', (_label, presented) => {
    expect(presented).not.toBe(secret);
    expect(matchesToken(presented, secret)).toBe(false);
  });
});

describe('matchesAny', () => {
  const keys = ['operator-key-one', 'operator-key-two'];
  const digests = keys.map(digest);

  it('accepts each configured key exactly', () => {
    expect(matchesAny('operator-key-one', digests)).toBe(true);
    expect(matchesAny('operator-key-two', digests)).toBe(true);
  });

  it('rejects an absent key', () => {
    expect(matchesAny(undefined, digests)).toBe(false);
  });

  it.each(['', 'operator-key', 'operator-key-one ', 'operator-key-onf', 'operator-key-three', 'OPERATOR-KEY-ONE'])(
    'rejects %j',
    (presented) => {
      expect(matchesAny(presented, digests)).toBe(false);
    },
  );

  it('rejects everything when no keys are configured', () => {
    expect(matchesAny('operator-key-one', [])).toBe(false);
  });
});
