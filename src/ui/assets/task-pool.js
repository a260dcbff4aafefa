/**
 * At most `limit` asynchronous tasks at once, in the order they were added; tasks may add more
 * while they run. `idle()` resolves once nothing runs or waits. A task that fails is logged and
 * does not stop the others.
 */
export function createTaskPool(limit) {
  /** @type {(() => Promise<void>)[]} */
  const queue = [];
  /** @type {(() => void)[]} */
  const idleWaiters = [];
  let active = 0;

  const pump = () => {
    while (active < limit && queue.length > 0) {
      const task = queue.shift();
      active++;
      task()
        .catch((error) => console.error(error))
        .finally(() => {
          active--;
          pump();
          if (active === 0 && queue.length === 0) for (const resolve of idleWaiters.splice(0)) resolve();
        });
    }
  };

  return {
    /** @param {() => Promise<void>} task */
    add(task) {
      queue.push(task);
      pump();
    },
    /** @returns {Promise<void>} */
    idle() {
      return active === 0 && queue.length === 0 ? Promise.resolve() : new Promise((resolve) => idleWaiters.push(resolve));
    },
  };
}
