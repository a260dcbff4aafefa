/**
 * When a failed webhook delivery is tried again: exponential backoff with equal jitter (half
 * the delay fixed, half random, so retries of many deliveries spread out), and the receiver's
 * `Retry-After` (seconds or an HTTP date), which the worker honours as a minimum.
 */

export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 1000, maxMs: 3_600_000 };

/** The delay after the `failures`-th failure (1 or more): in [cap/2, cap], cap = min(max, base·2^(failures−1)). */
export function retryDelayMs(failures: number, options: BackoffOptions, random: () => number = Math.random): number {
  const cap = Math.min(options.maxMs, options.baseMs * 2 ** Math.max(0, failures - 1));
  return Math.round(cap / 2 + (random() * cap) / 2);
}

/** A `Retry-After` value as milliseconds from `nowMs` (≥ 0), or undefined when absent or invalid. */
export function parseRetryAfter(value: string | undefined, nowMs: number): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}
