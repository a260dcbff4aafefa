/**
 * Agent tokens and operator keys. A token is 256 random bits, base64url; it is held only in
 * process memory by the live incarnation it belongs to and never persisted or logged.
 * Comparisons are constant-time in where the two differ. Every token has the same length
 * (43 characters), so a token check may answer a wrong length at once; operator keys, which
 * have any length, are hashed first so that not even their length shows.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export function mintToken(): string {
  return randomBytes(32).toString('base64url');
}

export function digest(secret: string): Buffer {
  return createHash('sha256').update(secret, 'utf8').digest();
}

/**
 * Constant-time check of a presented agent token against the live one. No digest per agent
 * or per request: a resident agent costs memory, and this runs on every agent request.
 */
export function matchesToken(presented: string | undefined, expected: string): boolean {
  if (presented === undefined || presented.length !== expected.length) return false;
  const a = Buffer.from(presented, 'utf8');
  const b = Buffer.from(expected, 'utf8');
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Constant-time check against a set of digests; every digest is compared. */
export function matchesAny(presented: string | undefined, expected: readonly Buffer[]): boolean {
  if (presented === undefined) return false;
  const candidate = digest(presented);
  let found = false;
  for (const key of expected) found = timingSafeEqual(candidate, key) || found;
  return found;
}
