/**
 * MCP tool server routes (operator): register, read, list, remove. Thin: parse, call the
 * registry, shape.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { ToolServerBody, ToolServerView, ref } from '../../contract/index.js';
import { TOOL_SERVER_NAME_PATTERN } from '../../domain/tool-servers.js';
import type { ToolServers } from '../../tools/mcp/tool-servers.js';
import { tenantOf } from '../auth.js';
import { errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';

const ServerParams = Type.Object({ name: Type.String({ pattern: TOOL_SERVER_NAME_PATTERN, description: 'Lowercase letters, digits and `-`, at most 32.' }) });
const ServerList = Type.Object({ items: Type.Array(ref(ToolServerView)) }, { additionalProperties: false });

export const toolServerRoutes: FastifyPluginAsyncTypebox<{ servers: ToolServers }> = async (app, { servers }) => {
  app.put('/v1/tool-servers/:name', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'putToolServer',
      summary: 'Register or replace an MCP tool server',
      description:
        'Either `url` (Streamable HTTP; an older HTTP+SSE server is reached too) or `command` (stdio, only where AGENTFOREST_TOOL_SERVER_COMMANDS=on). ' +
        'A secret is never stored: give `{env: "VAR"}` for a header, read from the service\'s environment when the server is reached, under the ' +
        "model keys' rule (AGENTFOREST_MODEL_KEY_ENVS, AGENTFOREST_MODEL_BASE_URLS). The server is reached and its tools listed before the answer: " +
        '`state` says whether that worked (an unreachable server stays registered and is tried again). Its tools appear as `mcp__<name>__<tool>` ' +
        'to every agent granted them. Durable before answered; replaces a server of the same name. ' +
        "With a tenant key the server is the tenant's: its tools are its agents' only; it has a `url` (never a `command`) whose host resolves " +
        'to public addresses only (not loopback, private or link-local), checked now and at every connection. Another tenant\'s name is 404 as an ' +
        "unknown one; a global server (an admin's) is 403. An admin replacing a tenant's server keeps it the tenant's.",
      security: OPERATOR_SECURITY,
      params: ServerParams,
      body: ref(ToolServerBody),
      response: { 200: ref(ToolServerView), ...errorResponses(['VALIDATION', 'UNAUTHORIZED', 'TOOL_SERVER_NOT_FOUND']) },
    },
  }, async (request) => servers.put(request.params.name, request.body, tenantOf(request)));

  app.get('/v1/tool-servers', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'listToolServers',
      summary: 'The MCP tool servers',
      description: "By name; each with its state and the tools agents may be granted. A tenant key sees its own servers and the global ones.",
      security: OPERATOR_SECURITY,
      response: { 200: ServerList, ...errorResponses([]) },
    },
  }, async (request) => ({ items: servers.list(tenantOf(request)) }));

  app.get('/v1/tool-servers/:name', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'getToolServer',
      summary: 'One MCP tool server',
      security: OPERATOR_SECURITY,
      params: ServerParams,
      response: { 200: ref(ToolServerView), ...errorResponses(['TOOL_SERVER_NOT_FOUND']) },
    },
  }, async (request) => servers.get(request.params.name));

  app.delete('/v1/tool-servers/:name', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'deleteToolServer',
      summary: 'Remove an MCP tool server',
      description: "Its tools leave every agent at once (a call already running finishes). Durable before answered. A tenant key removes its own servers only (a global one: 403).",
      security: OPERATOR_SECURITY,
      params: ServerParams,
      response: { 204: Type.Null({ description: 'Removed.' }), ...errorResponses(['UNAUTHORIZED', 'TOOL_SERVER_NOT_FOUND']) },
    },
  }, async (request, reply) => {
    await servers.delete(request.params.name, tenantOf(request));
    return reply.code(204).send(null);
  });
};
