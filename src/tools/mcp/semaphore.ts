/**
 * A bound on work at once: `acquire` waits for a slot (first come, first served) and resolves
 * with its release; a wait whose signal aborts leaves the queue.
 */
export class Semaphore {
  private free: number;
  private readonly queue: (() => void)[] = [];

  constructor(slots: number) {
    this.free = Math.max(1, slots);
  }

  /** How many wait for a slot. */
  get waiting(): number {
    return this.queue.length;
  }

  async acquire(signal?: AbortSignal): Promise<() => void> {
    if (this.free > 0) {
      this.free--;
      return this.releaser();
    }
    await new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        const at = this.queue.indexOf(grant);
        if (at >= 0) this.queue.splice(at, 1);
        reject(signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
      };
      const grant = (): void => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      if (signal?.aborted === true) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.queue.push(grant);
    });
    return this.releaser();
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.queue.shift();
      if (next !== undefined) next();
      else this.free++;
    };
  }
}
