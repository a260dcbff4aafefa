/**
 * A cap on open connections (Node's `server.maxConnections`): a connection beyond it is closed
 * at once, before any of its bytes are read, so a flood of sockets cannot take the process's
 * file descriptors or memory from the clients it serves. Closed connections are counted in the
 * log, at most one line per interval, not one per connection.
 */
import type { FastifyInstance } from 'fastify';

const LOG_INTERVAL_MS = 10_000;

export function capConnections(app: FastifyInstance, max: number): void {
  app.server.maxConnections = max;
  let dropped = 0;
  let timer: NodeJS.Timeout | undefined;
  app.server.on('drop', () => {
    dropped += 1;
    if (timer !== undefined) return;
    app.log.warn({ maxConnections: max }, `a connection was closed at once: ${max} connections are open (AGENTFOREST_MAX_CONNECTIONS)`);
    dropped = 0;
    timer = setTimeout(() => {
      timer = undefined;
      if (dropped > 0) app.log.warn({ maxConnections: max, dropped }, `${dropped} more connections were closed at once: ${max} connections are open`);
      dropped = 0;
    }, LOG_INTERVAL_MS);
    timer.unref();
  });
}
