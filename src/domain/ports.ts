/**
 * The small interfaces through which the domain receives time and identities. The domain
 * never reads a clock or a random source itself, so every transition is reproducible in tests.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const ID_KINDS = ['agent', 'message', 'inbox', 'turn', 'step', 'activation'] as const;
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
    now: () => t,
    advance(ms) {
      t += ms;
    },
  };
}
