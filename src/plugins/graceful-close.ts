/**
 * Graceful close. Closing waits for every connection to end. `forceCloseConnections: 'idle'`
 * closes the idle ones once, when closing starts; a keep-alive connection still answering a
 * request then stays open after its response, until its keep-alive timeout (72 s), and the
 * process with it. Until the server has closed, connections are closed as soon as they fall
 * idle.
 *
 * Requests that still arrive on open connections meanwhile are refused as DRAINING (Fastify
 * answers them `Connection: close`). Fastify's own 503 for them had no `code`, and no
 * `toolResult` on a tool call; the app turns it off (`return503OnClosing: false`).
 */
import { MESSAGES, ServiceError } from '../domain/errors.js';
import { rootPlugin } from './root-plugin.js';

export const gracefulClose = rootPlugin('graceful-close', async (app) => {
  let closing = false;
  let sweep: NodeJS.Timeout | undefined;
  // A callback hook: every request passes here, and an async one costs a promise each.
  app.addHook('onRequest', (_request, _reply, done) => {
    done(closing ? new ServiceError('DRAINING', MESSAGES.serviceDraining) : undefined);
  });
  app.addHook('preClose', async () => {
    closing = true;
    sweep = setInterval(() => app.server.closeIdleConnections(), 50);
    sweep.unref();
  });
  // onClose hooks run once the server has closed.
  app.addHook('onClose', async () => clearInterval(sweep));
});
