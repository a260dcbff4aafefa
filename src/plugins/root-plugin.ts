/**
 * Marks a plugin as one that decorates the instance it is registered on (its hooks, handlers
 * and compilers apply to every route), as fastify-plugin does: Fastify skips the plugin's own
 * encapsulation context when the function carries `skip-override`.
 */
import type { FastifyPluginAsync } from 'fastify';

export function rootPlugin<Options extends Record<string, unknown>>(name: string, plugin: FastifyPluginAsync<Options>): FastifyPluginAsync<Options> {
  return Object.assign(plugin, {
    [Symbol.for('skip-override')]: true,
    [Symbol.for('fastify.display-name')]: name,
  });
}
