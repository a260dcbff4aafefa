/**
 * Misdirection, with several instances on one database: a request for an agent whose forest
 * another instance owns is refused as MISDIRECTED with the owner's URL (the error handler adds
 * the request's path and the Location header). Registered only when instances share a
 * database: on a single instance it would add an await to every agent request.
 *
 * This only redirects; it is not enforcement. Writes are fenced by the store (a write for a
 * forest this instance no longer owns is refused at commit).
 */
import { ServiceError } from '../domain/errors.js';
import type { AgentService } from '../services/agent-service.js';
import { rootPlugin } from './root-plugin.js';

export const misdirection = rootPlugin<{ agents: Pick<AgentService, 'misdirection'> }>('misdirection', async (app, { agents }) => {
  app.addHook('preHandler', async (request) => {
    const id = (request.params as { id?: unknown } | undefined)?.id;
    if (typeof id !== 'string') return;
    const owner = await agents.misdirection(id);
    if (owner !== undefined) {
      throw new ServiceError('MISDIRECTED', `agent "${id}" belongs to a forest owned by the instance at ${owner}; send the request there`, { location: owner });
    }
  });
});
