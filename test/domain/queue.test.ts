import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Queue } from '../../src/domain/queue.js';

type Op = { kind: 'push'; from: number; value: number } | { kind: 'shift'; from: number } | { kind: 'prepend'; from: number; values: number[] };

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('push' as const), from: fc.nat(), value: fc.integer() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('shift' as const), from: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('prepend' as const), from: fc.nat(), values: fc.array(fc.integer(), { maxLength: 3 }) }) },
);

describe('Queue', () => {
  it('every version keeps reading what it held when made, whichever version is extended later', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
        // Each op derives a new version from an earlier one (forks included), as the turn
        // machine does when it computes a transition from a state it already moved past.
        const versions: { queue: Queue<number>; model: number[] }[] = [{ queue: Queue.empty(), model: [] }];
        for (const o of ops) {
          const base = versions[o.from % versions.length]!;
          if (o.kind === 'push') versions.push({ queue: base.queue.push(o.value), model: [...base.model, o.value] });
          else if (o.kind === 'shift') versions.push({ queue: base.queue.shift(), model: base.model.slice(1) });
          else versions.push({ queue: base.queue.prepend(o.values), model: [...o.values, ...base.model] });
        }
        for (const { queue, model } of versions) {
          expect(queue.toArray()).toEqual(model);
          expect([...queue]).toEqual(model);
          expect(queue.length).toBe(model.length);
          expect(queue.at(0)).toBe(model[0]);
          expect(queue.at(model.length)).toBeUndefined();
        }
      }),
      { seed: 20261130, numRuns: 300 },
    );
  });

  it('a long run of pushes and shifts keeps FIFO order through compactions', () => {
    let queue = Queue.empty<number>();
    for (let i = 0; i < 10_000; i++) {
      queue = queue.push(i);
      if (i % 3 === 0) queue = queue.shift();
    }
    expect(queue.length).toBe(10_000 - Math.ceil(10_000 / 3));
    expect(queue.at(0)).toBe(Math.ceil(10_000 / 3));
  });
});
