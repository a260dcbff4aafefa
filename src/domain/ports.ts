/**
 * The small interfaces through which the domain receives time and identities. The domain
 * never reads a clock or a random source itself, so every transition is reproducible in tests.
 */
import { isoTime } from './session.js';

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /**
   * `now()` as an ISO-8601 UTC string (the `at` of entries, `createdAt` of headers). Calls
   * within one millisecond may return the same string object.
   */
  iso(): string;
}

/**
 * A Clock reading `now`, whose `iso()` keeps the last string it made: consecutive calls within
 * one millisecond share it instead of formatting it again. The cache belongs to this clock
 * alone, so the domain holds no module state.
 */
export function clockOf(now: () => number): Clock {
  let lastMs = Number.NaN;
  let lastIso = '';
  return {
    now,
    iso() {
      const ms = now();
      if (ms !== lastMs) {
        lastIso = isoTime(ms);
        lastMs = ms;
      }
      return lastIso;
    },
  };
}

export const ID_KINDS = ['agent', 'message', 'inbox', 'turn', 'step', 'activation', 'webhook'] as const;
export type IdKind = (typeof ID_KINDS)[number];

export interface IdSource {
  next(kind: IdKind): string;
}

/** Deterministic ids for tests: `<kind>-1`, `<kind>-2`, ... */
export function sequentialIds(): IdSource {
  const counters = new Map<IdKind, number>();
  return {
    next(kind) {
      const n = (counters.get(kind) ?? 0) + 1;
      counters.set(kind, n);
      return `${kind}-${n}`;
    },
  };
}

/** A manually advanced clock for tests. */
export function fixedClock(start = Date.UTC(2026, 0, 1)): Clock & { advance(ms: number): void } {
  let t = start;
  return {
    ...clockOf(() => t),
    advance(ms) {
      t += ms;
    },
  };
}
