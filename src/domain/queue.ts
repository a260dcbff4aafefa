/**
 * An immutable FIFO sequence for the turn machine's inbox and pending context, with O(1)
 * amortised `push` and `shift`, so that an agent holding thousands of queued items or staged
 * messages pays the same per delivery as one holding none.
 *
 * Versions share one backing array. It is only ever appended to, and only by the version whose
 * window ends at its current end; any other version copies its window before appending. So a
 * window, once made, always reads the same elements: every version stays valid and immutable
 * to its readers. The backing is compacted once most of it lies behind the head.
 */
export class Queue<T> implements Iterable<T> {
  private static readonly EMPTY = new Queue<never>([], 0, 0);

  private constructor(
    private readonly items: T[],
    private readonly start: number,
    readonly length: number,
  ) {}

  static empty<T>(): Queue<T> {
    return Queue.EMPTY;
  }

  static of<T>(items: Iterable<T>): Queue<T> {
    const copy = [...items];
    return copy.length === 0 ? Queue.EMPTY : new Queue(copy, 0, copy.length);
  }

  private get end(): number {
    return this.start + this.length;
  }

  /** The element at `index` from the head, or undefined. */
  at(index: number): T | undefined {
    return index >= 0 && index < this.length ? this.items[this.start + index] : undefined;
  }

  /** A queue with `item` at the end. */
  push(item: T): Queue<T> {
    if (this.end === this.items.length && this.items !== Queue.EMPTY.items) {
      this.items.push(item);
      return new Queue(this.items, this.start, this.length + 1);
    }
    const copy = this.items.slice(this.start, this.end);
    copy.push(item);
    return new Queue(copy, 0, copy.length);
  }

  /** A queue without its head (the same queue when empty). */
  shift(): Queue<T> {
    if (this.length <= 1) return Queue.EMPTY;
    const start = this.start + 1;
    // Compact when most of the backing is behind the head: amortised O(1) per shift.
    if (start >= 32 && start * 2 >= this.items.length) {
      const copy = this.items.slice(start, this.end);
      return new Queue(copy, 0, copy.length);
    }
    return new Queue(this.items, start, this.length - 1);
  }

  /** A queue of `items` followed by this queue's elements. */
  prepend(items: readonly T[]): Queue<T> {
    return items.length === 0 ? this : Queue.of([...items, ...this]);
  }

  *[Symbol.iterator](): Iterator<T> {
    for (let i = this.start; i < this.end; i++) yield this.items[i] as T;
  }

  toArray(): T[] {
    return this.items.slice(this.start, this.end);
  }

  some(predicate: (item: T) => boolean): boolean {
    for (let i = this.start; i < this.end; i++) if (predicate(this.items[i] as T)) return true;
    return false;
  }

  count(predicate: (item: T) => boolean): number {
    let n = 0;
    for (let i = this.start; i < this.end; i++) if (predicate(this.items[i] as T)) n++;
    return n;
  }

  map<U>(f: (item: T) => U): U[] {
    const out: U[] = [];
    for (let i = this.start; i < this.end; i++) out.push(f(this.items[i] as T));
    return out;
  }
}
