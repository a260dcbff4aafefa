/**
 * A promise chain per child id: creation, cold resume, settlement and disposal of one child
 * run one at a time, in arrival order, and never interleave across their awaits.
 */
export class ChildLock {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(id: string, critical: () => Promise<T> | T): Promise<T> {
    const previous = this.tails.get(id) ?? Promise.resolve();
    const result = previous.then(critical, critical);
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(id, tail);
    void tail.then(() => {
      if (this.tails.get(id) === tail) this.tails.delete(id);
    });
    return result;
  }
}
