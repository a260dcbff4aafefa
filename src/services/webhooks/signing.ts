/**
 * Standard Webhooks signing: a secret is `whsec_` and base64 of the HMAC key; a delivery is
 * signed over `<webhook-id>.<webhook-timestamp>.<body>` with HMAC-SHA256, sent as
 * `webhook-signature: v1,<base64>`. Receivers verify it with any Standard Webhooks library.
 */
import { createHmac, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';

export interface SignedHeaders {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
}

/** A new secret: `whsec_` and base64 of 24 random bytes. */
export function generateSecret(): string {
  return PREFIX + randomBytes(24).toString('base64');
}

/** The HMAC key of a secret; throws (without echoing the secret) when it is malformed. */
export function parseSecret(secret: string): Buffer {
  const encoded = secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : '';
  const key = /^[A-Za-z0-9+/]+={0,2}$/.test(encoded) ? Buffer.from(encoded, 'base64') : Buffer.alloc(0);
  if (key.length < 16 || key.length > 64) throw new Error('a webhook secret is "whsec_" followed by base64 of 16 to 64 bytes');
  return key;
}

export function signatureHeaders(key: Buffer, id: string, timestampSeconds: number, body: string): SignedHeaders {
  const timestamp = String(timestampSeconds);
  const signature = createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64');
  return { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': `v1,${signature}` };
}
