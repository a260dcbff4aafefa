/**
 * Standard Webhooks signing: a webhook carries `webhook-id`, `webhook-timestamp` and
 * `webhook-signature` headers, the signature being `v1,` and the base64 HMAC-SHA256 of
 * `id.timestamp.body` under the endpoint's secret. A secret is written `whsec_` and the base64
 * of its key; the receiver holds the same string and recomputes the signature to verify.
 *
 * Secrets never appear in an error message: a malformed one is refused with a description of
 * the expected shape only.
 */
import { createHmac, randomBytes } from 'node:crypto';

const SECRET_PREFIX = 'whsec_';
const GENERATED_KEY_BYTES = 24;
const MIN_KEY_BYTES = 16;
const MAX_KEY_BYTES = 64;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
const MALFORMED_SECRET = 'a webhook secret is "whsec_" followed by base64 of 16 to 64 bytes';

/** The three headers that sign one webhook. */
export interface SignedHeaders {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
}

/** A new random secret: `whsec_` and the base64 of 24 random bytes. */
export function generateSecret(): string {
  return SECRET_PREFIX + randomBytes(GENERATED_KEY_BYTES).toString('base64');
}

/**
 * The signing key a `whsec_<base64>` secret holds (padding optional). Throws when the prefix
 * is missing, the base64 is not canonical, or the key is not 16 to 64 bytes; the message
 * never contains the secret.
 */
export function parseSecret(secret: string): Buffer {
  if (!secret.startsWith(SECRET_PREFIX)) throw new Error(MALFORMED_SECRET);
  const encoded = secret.slice(SECRET_PREFIX.length);
  if (!BASE64.test(encoded) || encoded.length % 4 === 1) throw new Error(MALFORMED_SECRET);
  const key = Buffer.from(encoded, 'base64');
  // Buffer decoding ignores stray bits; re-encoding shows whether the text was canonical.
  if (key.toString('base64').replace(/=+$/, '') !== encoded.replace(/=+$/, '')) throw new Error(MALFORMED_SECRET);
  if (key.length < MIN_KEY_BYTES || key.length > MAX_KEY_BYTES) throw new Error(MALFORMED_SECRET);
  return key;
}

/**
 * The signed headers for `body` sent as message `id` at `timestampSeconds` (Unix seconds, a
 * non-negative integer; anything else is a RangeError).
 */
export function signatureHeaders(key: Buffer, id: string, timestampSeconds: number, body: string): SignedHeaders {
  if (!Number.isSafeInteger(timestampSeconds) || timestampSeconds < 0) {
    throw new RangeError('a webhook timestamp is a non-negative whole number of seconds');
  }
  const timestamp = String(timestampSeconds);
  const signature = createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64');
  return { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': `v1,${signature}` };
}
