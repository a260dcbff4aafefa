/**
 * Declared backend tools (operator) and the tool worker pool. Thin: parse, call the registry
 * or the pool, shape.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { BackendToolBody, BackendToolView, PoolToolCall, ref } from '../../contract/index.js';
import { BACKEND_TOOL_NAME_PATTERN } from '../../domain/backend-tools.js';
import type { AdmissionGate } from '../../agents/admission-gate.js';
import type { BackendTools } from '../../tools/backend/backend-tools.js';
import type { Topology } from '../../topology/topology.js';
import { clientGone } from '../client-gone.js';
import { clusterCaller } from '../cluster/index.js';
import { errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';

const ToolParams = Type.Object({ name: Type.String({ pattern: BACKEND_TOOL_NAME_PATTERN, description: 'Letters, digits, `_` and `-`, at most 64; not starting with `mcp__`.' }) });
const ToolList = Type.Object({ items: Type.Array(ref(BackendToolView)) }, { additionalProperties: false });
const NextCallBody = Type.Object(
  {
    waitMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000, default: 0, description: 'How long to wait for a call (long-poll).' })),
    names: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 256, description: 'Only calls of these tools.' })),
    rootId: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Only calls of this forest.' })),
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
        'and is offered to the tool worker pool (`POST /v1/tool-calls/next`); a driven agent waits for its result. Durable before answered; replaces a declaration of the same name.',
      security: OPERATOR_SECURITY,
      params: ToolParams,
      body: ref(BackendToolBody),
      response: { 200: ref(BackendToolView), ...errorResponses(['VALIDATION']) },
    },
  }, async (request) => tools.put(request.params.name, request.body));

  app.get('/v1/backend-tools', {
    schema: {
      tags: ['tool-servers'],
      operationId: 'listBackendTools',
      summary: 'The declared backend tools',
      security: OPERATOR_SECURITY,
      response: { 200: ToolList, ...errorResponses([]) },
    },
  }, async () => ({ items: tools.list() }));

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
      description: 'It leaves every agent at once. Durable before answered.',
      security: OPERATOR_SECURITY,
      params: ToolParams,
      response: { 204: Type.Null({ description: 'Removed.' }), ...errorResponses(['BACKEND_TOOL_NOT_FOUND']) },
    },
  }, async (request, reply) => {
    await tools.delete(request.params.name);
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
        'A call whose lease runs out without a result is handed out again with the same `effectKey`, up to the step\'s attempts; then it gets an error result.',
      security: OPERATOR_SECURITY,
      body: NextCallBody,
      response: { 200: Type.Object({ call: ref(PoolToolCall) }, { additionalProperties: false }), 204: Type.Null({ description: 'No call came within waitMs.' }), ...errorResponses(['DRAINING']) },
    },
  }, async (request, reply) => {
    gate.admitNewWork();
    const { waitMs = 0, names, rootId } = request.body;
    const claim = await topology.claimToolCall({ names, rootId }, waitMs, clientGone(reply), clusterCaller(request));
    if (claim === null) return reply.code(204).send(null);
    // Another instance answered this route's JSON.
    if ('forwarded' in claim) return JSON.parse(claim.forwarded.toString('utf8')) as { call: PoolToolCall };
    return { call: claim.local };
  });
};
