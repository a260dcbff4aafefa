/**
 * Agent tokens and operator keys. A token is 256 random bits, base64url; it is held only in
 * process memory by the live incarnation it belongs to and never persisted or logged.
 * Comparisons hash both sides first, so their cost does not depend on where they differ or on
 * the candidate's length.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export function mintToken(): string {
  return randomBytes(32).toString('base64url');
}

export function digest(secret: string): Buffer {
  return createHash('sha256').update(secret, 'utf8').digest();
}

/** Constant-time check of a presented secret against a stored digest. */
export function matchesDigest(presented: string | undefined, expected: Buffer): boolean {
  if (presented === undefined) return false;
  return timingSafeEqual(digest(presented), expected);
}

/** Constant-time check against a set of digests; every digest is compared. */
export function matchesAny(presented: string | undefined, expected: readonly Buffer[]): boolean {
  if (presented === undefined) return false;
  const candidate = digest(presented);
  let found = false;
  for (const key of expected) found = timingSafeEqual(candidate, key) || found;
  return found;
}
