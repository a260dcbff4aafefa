import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { generateSecret, parseSecret, signatureHeaders } from '../../../src/observation/webhooks/signing.js';

const nowSeconds = (): number => Math.floor(Date.now() / 1000);
function thrownMessage(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error('expected a throw');
}

const body = JSON.stringify({ type: 'agent.finished', data: { agentId: 'agt_1', text: 'done — ✓' } });

describe('webhook signing', () => {
  it('generates whsec_ secrets of 24 random bytes, each different', () => {
    const secrets = Array.from({ length: 20 }, () => generateSecret());
    for (const secret of secrets) {
      expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
      expect(parseSecret(secret)).toHaveLength(24);
    }
    expect(new Set(secrets).size).toBe(secrets.length);
  });

  it('signs so that the Standard Webhooks reference verifier accepts it', () => {
    const secret = generateSecret();
    const headers = signatureHeaders(parseSecret(secret), 'msg_1', nowSeconds(), body);
    expect(headers['webhook-id']).toBe('msg_1');
    expect(headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(new Webhook(secret).verify(body, { ...headers })).toEqual(JSON.parse(body));
  });

  it('signs what the reference signer signs', () => {
    const secret = generateSecret();
    const at = 1_750_000_000;
    const headers = signatureHeaders(parseSecret(secret), 'msg_2', at, body);
    expect(headers['webhook-timestamp']).toBe(String(at));
    expect(headers['webhook-signature']).toBe(new Webhook(secret).sign('msg_2', new Date(at * 1000), body));
  });

  it('is refused for a tampered body, a different id or a wrong secret', () => {
    const secret = generateSecret();
    const headers = signatureHeaders(parseSecret(secret), 'msg_3', nowSeconds(), body);
    expect(() => new Webhook(secret).verify(body.replace('done', 'dune'), { ...headers })).toThrow();
    expect(() => new Webhook(secret).verify(body, { ...headers, 'webhook-id': 'msg_4' })).toThrow();
    expect(() => new Webhook(generateSecret()).verify(body, { ...headers })).toThrow();
  });

  it('refuses a non-integer or negative timestamp', () => {
    const key = parseSecret(generateSecret());
    expect(() => signatureHeaders(key, 'msg_5', 1.5, body)).toThrow(RangeError);
    expect(() => signatureHeaders(key, 'msg_5', -1, body)).toThrow(RangeError);
  });

  it('parses padded and unpadded secrets of 16 to 64 bytes', () => {
    for (const bytes of [16, 17, 32, 64]) {
      const encoded = Buffer.alloc(bytes, 7).toString('base64');
      expect(parseSecret(`whsec_${encoded}`)).toEqual(Buffer.alloc(bytes, 7));
      expect(parseSecret(`whsec_${encoded.replace(/=+$/, '')}`)).toEqual(Buffer.alloc(bytes, 7));
    }
  });

  it('refuses malformed secrets without repeating them in the error', () => {
    const key = (bytes: number): string => Buffer.alloc(bytes, 0xab).toString('base64');
    const malformed = [
      '',
      'whsec_',
      key(32), // no prefix
      `WHSEC_${key(32)}`,
      `whsec_${key(15)}`,
      `whsec_${key(65)}`,
      `whsec_${key(32)}!`,
      `whsec_${key(32).slice(0, 10)}-_${key(32).slice(12)}`, // base64url alphabet
      `whsec_ ${key(32)}`,
      `whsec_${key(32)}A`, // a length no base64 has
      'whsec_qqqqqqqqqqqqqqqqqqqqqr==', // stray bits: not canonical
    ];
    for (const secret of malformed) {
      const message = thrownMessage(() => parseSecret(secret));
      expect(message, secret).toBe('a webhook secret is "whsec_" followed by base64 of 16 to 64 bytes');
      const keyText = secret.slice('whsec_'.length).trim();
      if (keyText !== '') expect(message).not.toContain(keyText);
    }
  });
});
