/**
 * Declared backend tools (operator) and the tool worker pool. Thin: parse, call the registry
 * or the pool, shape.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { BackendToolBody, BackendToolView, PoolToolCall, ref } from '../../contract/index.js';
import { BACKEND_TOOL_NAME_PATTERN } from '../../domain/backend-tools.js';
import { TENANT_ID_PATTERN } from '../../domain/tenants.js';
import type { AdmissionGate } from '../../agents/admission-gate.js';
import type { BackendTools } from '../../tools/backend/backend-tools.js';
import type { Topology } from '../../topology/topology.js';
import { tenantOf } from '../auth.js';
import { clientGone } from '../client-gone.js';
import { clusterCaller, poolTenant } from '../cluster/index.js';
import { errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';

const ToolParams = Type.Object({ name: Type.String({ pattern: BACKEND_TOOL_NAME_PATTERN, description: 'Letters, digits, `_` and `-`, at most 64; not starting with `mcp__`.' }) });
const ToolList = Type.Object({ items: Type.Array(ref(BackendToolView)) }, { additionalProperties: false });
const NextCallBody = Type.Object(
  {
    waitMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000, default: 0, description: 'How long to wait for a call (long-poll).' })),
    names: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 256, description: 'Only calls of these tools.' })),
    rootId: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Only calls of this forest.' })),
    tenantId: Type.Optional(
      Type.String({ pattern: TENANT_ID_PATTERN, description: "Only calls of this tenant's agents (an admin key's filter; a tenant key is always handed its own tenant's only)." }),
    ),
  },
  { additionalProperties: false },
);

export interface BackendToolRoutesOptions {
  tools: BackendTools;
  /** The tool worker pool: this instance's, or with several instances every instance's. */
  topology: Pick<Topology, 'claimToolCall'>;
  gate: Pick<AdmissionGate, 'admitNewWork'>;
}

export const backendToolRoutes: FastifyPluginAsyncTypebox<BackendToolRoutesOptions> = async (app, { tools, topology, gate }) => {
  app.put('/v1/backend-tools/:name', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'putBackendTool',
      summary: 'Declare a tool the backend executes',
      description:
        'Agents granted it see it in their steps under its name, with `parameters` as its schema. A call to it is `awaiting`, as a backend\'s own call, ' +
        'and is offered to the tool worker pool (`POST /v1/tool-calls/next`); a driven agent waits for its result. Durable before answered; replaces a declaration of the same name. ' +
        "With a tenant key the tool is the tenant's: only its agents see it. Another tenant's name is 404 as an unknown one; a global tool (an admin's) is 403. " +
        "An admin replacing a tenant's tool keeps it the tenant's.",
      security: OPERATOR_SECURITY,
      params: ToolParams,
      body: ref(BackendToolBody),
      response: { 200: ref(BackendToolView), ...errorResponses(['VALIDATION', 'UNAUTHORIZED', 'BACKEND_TOOL_NOT_FOUND']) },
    },
  }, async (request) => tools.put(request.params.name, request.body, tenantOf(request)));

  app.get('/v1/backend-tools', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'listBackendTools',
      summary: 'The declared backend tools',
      description: 'By name. A tenant key sees its own tools and the global ones.',
      security: OPERATOR_SECURITY,
      response: { 200: ToolList, ...errorResponses([]) },
    },
  }, async (request) => ({ items: tools.list(tenantOf(request)) }));

  app.get('/v1/backend-tools/:name', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'getBackendTool',
      summary: 'One declared backend tool',
      security: OPERATOR_SECURITY,
      params: ToolParams,
      response: { 200: ref(BackendToolView), ...errorResponses(['BACKEND_TOOL_NOT_FOUND']) },
    },
  }, async (request) => tools.get(request.params.name));

  app.delete('/v1/backend-tools/:name', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'deleteBackendTool',
      summary: 'Remove a declared backend tool',
      description: 'It leaves every agent at once. Durable before answered. A tenant key removes its own tools only (a global one: 403).',
      security: OPERATOR_SECURITY,
      params: ToolParams,
      response: { 204: Type.Null({ description: 'Removed.' }), ...errorResponses(['UNAUTHORIZED', 'BACKEND_TOOL_NOT_FOUND']) },
    },
  }, async (request, reply) => {
    await tools.delete(request.params.name, tenantOf(request));
    return reply.code(204).send(null);
  });

  app.post('/v1/tool-calls/next', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'claimToolCall',
      summary: 'Take the oldest awaiting call of a declared backend tool (tool worker pool)',
      description:
        'Oldest first over every agent (of `rootId`, of `names`), each call handed to one worker at a time under a lease as long as a step\'s. ' +
        'Post the result with `POST /v1/agents/{agentId}/steps/{stepId}/tool-results` (the agent token, `X-Step-Attempt: stepAttempt`). ' +
        'A call whose lease runs out without a result is handed out again with the same `effectKey`, up to the step\'s attempts; then it gets an error result. ' +
        "A tenant key is handed calls of its own tenant's agents only (naming another tenant in `tenantId`: none).",
      security: OPERATOR_SECURITY,
      body: NextCallBody,
      response: { 200: Type.Object({ call: ref(PoolToolCall) }, { additionalProperties: false }), 204: Type.Null({ description: 'No call came within waitMs.' }), ...errorResponses(['DRAINING']) },
    },
  }, async (request, reply) => {
    gate.admitNewWork();
    const { waitMs = 0, names, rootId } = request.body;
    const tenantId = poolTenant(tenantOf(request), request.body.tenantId);
    if (tenantId === null) return reply.code(204).send(null);
    // With several instances the filter and the caller's key travel together: each instance's route sets the same tenant.
    const claim = await topology.claimToolCall({ names, rootId, tenantId }, waitMs, clientGone(reply), clusterCaller(request));
    if (claim === null) return reply.code(204).send(null);
    // Another instance answered this route's JSON.
    if ('forwarded' in claim) return JSON.parse(claim.forwarded.toString('utf8')) as { call: PoolToolCall };
    return { call: claim.local };
  });
};
