/**
 * Agent routes: create, list, get, dispose and resume roots; messages; session paging; the
 * tools an agent sees and its service-owned tool calls. Thin: parse, call the service, shape.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { ServiceError } from '../../domain/errors.js';
import type { AgentDeliveries } from '../../agents/deliveries.js';
import type { RootLifecycle } from '../../agents/root-lifecycle.js';
import type { AgentQueries } from '../../agents/reads/agent-queries.js';
import type { NotRunningRoots } from '../../agents/reads/not-running-roots.js';
import type { Interrupts } from '../../children/interrupts.js';
import type { StepProtocol } from '../../steps/step-protocol.js';
import type { Topology } from '../../topology/topology.js';
import type { ToolCalls } from '../../tools/tool-calls.js';
import { agentToken } from '../auth.js';
import { clientGone } from '../client-gone.js';
import { tenantOf } from '../auth.js';
import { clusterCaller } from '../cluster/index.js';
import { refusesRequest } from '../error-status.js';
import { IdempotencyHeaders, idempotencyOf, markReplay } from '../idempotency.js';
import { AgentView, ref } from '../../contract/index.js';
import { AGENT_SECURITY, AgentIdParams, EmptyBody, errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import {
  AgentList,
  AgentWithToken,
  CreateRootBody,
  DisposeQuery,
  DisposeResult,
  InterruptBody,
  InterruptResult,
  ListQuery,
  MessageAccepted,
  MessageBody,
  NotRunningList,
  SessionPage,
  SessionQuery,
  ToolCallBody,
  ToolCallResult,
  ToolList,
} from './schemas.js';

export interface AgentRoutesOptions {
  roots: Pick<RootLifecycle, 'createRoot' | 'dispose' | 'resumeRoot'>;
  deliveries: Pick<AgentDeliveries, 'deliver'>;
  queries: Pick<AgentQueries, 'view' | 'sessionPage'>;
  notRunning: Pick<NotRunningRoots, 'list'>;
  interrupts: Pick<Interrupts, 'byOperator'>;
  protocol: Pick<StepProtocol, 'toolsFor'>;
  calls: Pick<ToolCalls, 'callTool'>;
  /** The live list: this instance's, or with several instances every instance's. */
  topology: Pick<Topology, 'list'>;
}

export const agentRoutes: FastifyPluginAsyncTypebox<AgentRoutesOptions> = async (app, { roots, deliveries, queries, notRunning, interrupts, protocol, calls, topology }) => {
  app.post('/v1/agents', {
    schema: {
      tags: ['agents'],
      operationId: 'createAgent',
      summary: 'Create a root agent',
      security: OPERATOR_SECURITY,
      body: CreateRootBody,
      response: { 201: AgentWithToken, ...errorResponses(['AGENT_EXISTS', 'QUOTA_EXCEEDED', 'DRAINING', 'AT_CAPACITY']) },
    },
  }, async (request, reply) => {
    const tenantId = tenantOf(request);
    const created = await roots.createRoot(tenantId === undefined ? request.body : { ...request.body, tenantId });
    return reply.status(201).send(created);
  });

  app.get('/v1/agents', {
    schema: {
      tags: ['agents'],
      operationId: 'listAgents',
      summary: 'List agents',
      description:
        'Without `parentId`: the live agents. With `parentId`: every child of that agent, resident or not. `kind` keeps roots or children only. ' +
        'Ordered by creation time, then id. Filters combine. ' +
        '`live=false` lists instead the durable roots that are not live, the ones to resume, paged the same way; with ' +
        '`parentId`, `status` or `kind` it is refused (VALIDATION), since none of them applies to a root that is not live.',
      security: OPERATOR_SECURITY,
      querystring: ListQuery,
      response: { 200: Type.Union([AgentList, NotRunningList]), ...errorResponses([], { bodyless: true }) },
    },
  }, async (request) => {
    const { parentId, status, kind, live, limit, cursor } = request.query;
    // A tenant key sees its own tenant's agents only; asking for another's is asking for no one's.
    const own = tenantOf(request);
    if (own !== undefined && request.query.tenantId !== undefined && request.query.tenantId !== own) return { items: [], nextCursor: null };
    const tenantId = own ?? request.query.tenantId;
    const tenant = tenantId === undefined ? {} : { tenantId };
    if (live === false) {
      const refused = Object.entries({ parentId, status, kind }).filter(([, value]) => value !== undefined).map(([name]) => name);
      if (refused.length > 0) {
        throw new ServiceError('VALIDATION', `live=false lists the roots that are not live and takes only limit and cursor; leave out ${refused.join(', ')}`);
      }
      return notRunning.list({ limit: limit ?? 100, ...(cursor === undefined ? {} : { cursor }), ...tenant });
    }
    const filter = { limit: limit ?? 100, ...(status === undefined ? {} : { status }), ...(kind === undefined ? {} : { kind }), ...(cursor === undefined ? {} : { cursor }), ...tenant };
    return topology.list(parentId === undefined ? filter : { ...filter, parentId }, clusterCaller(request));
  });

  app.get('/v1/agents/:id', {
    schema: {
      tags: ['agents'],
      operationId: 'getAgent',
      summary: 'Get an agent',
      description: 'Live agents, and children that are not resident (settled or closed). A root that is not live is 404.',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      response: { 200: ref(AgentView), ...errorResponses(['AGENT_NOT_FOUND'], { bodyless: true }) },
    },
  }, async (request) => queries.view(request.params.id));

  app.delete('/v1/agents/:id', {
    schema: {
      tags: ['agents'],
      operationId: 'disposeAgent',
      summary: 'Dispose a root or close a child',
      description:
        'Answers 202 with the agent as it was when disposal started, once it has left the live registry. ' +
        '`cascade=true` (default) first closes live descendants child-first; with `cascade=false` they stay live until ' +
        'they settle, and their reports then fail with PARENT_UNAVAILABLE. A settled child is closed for good (it can no longer be cold-resumed).',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      querystring: DisposeQuery,
      body: EmptyBody,
      response: { 202: DisposeResult, ...errorResponses(['AGENT_NOT_FOUND']) },
    },
  }, async (request, reply) => {
    const agent = await roots.dispose(request.params.id, request.query.cascade ?? true);
    return reply.status(202).send({ agent });
  });

  app.post('/v1/agents/:id/interrupt', {
    schema: {
      tags: ['agents'],
      operationId: 'interruptAgent',
      summary: "Interrupt an agent's open turn",
      description:
        'Cancels the open turn at once (its turn-end is `cancelled`); a step claimed meanwhile is refused later with ' +
        'STEP_CONFLICT, a built-in-driver request in flight is aborted. With `keepInbox` (default) queued messages stay ' +
        'queued and none starts until the next waking message; `subtree` interrupts every live descendant first, ' +
        'child-first. Answers once the turn-ends are durable; an agent that is not live has nothing to interrupt.',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      body: InterruptBody,
      response: { 202: InterruptResult, ...errorResponses(['AGENT_NOT_FOUND']) },
    },
  }, async (request, reply) => {
    const result = await interrupts.byOperator(request.params.id, { keepInbox: request.body.keepInbox ?? true, subtree: request.body.subtree ?? false });
    return reply.status(202).send(result);
  });

  app.post('/v1/agents/:id/resume', {
    schema: {
      tags: ['agents'],
      operationId: 'resumeAgent',
      summary: 'Re-open a root after a restart',
      description:
        'A new live incarnation with a new token. A turn a crash left open goes on: its open step is claimable again as the next attempt. ' +
        'With `Idempotency-Key`, a retry whose first answer was lost gets the same answer, with the token of the root\'s live incarnation.',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      headers: IdempotencyHeaders,
      body: EmptyBody,
      response: { 201: AgentWithToken, ...errorResponses(['AGENT_NOT_FOUND', 'AGENT_EXISTS', 'NOT_RESUMABLE', 'IDEMPOTENCY_CONFLICT', 'QUOTA_EXCEEDED', 'DRAINING', 'AT_CAPACITY']) },
    },
  }, async (request, reply) => {
    const { replayed, ...resumed } = await roots.resumeRoot(request.params.id, idempotencyOf(request));
    markReplay(reply, replayed);
    return reply.status(201).send(resumed);
  });

  app.post('/v1/agents/:id/messages', {
    schema: {
      tags: ['agents'],
      operationId: 'postMessage',
      summary: 'Send a message (followup, inject or steer)',
      description:
        'followup queues one inbox item, the sole prompt of a later turn. inject adds context without a turn: ' +
        'appended at once to an idle agent, staged for a running one until the next step start or the turn end. ' +
        'steer joins the next step of the open turn, or queues like a followup when no turn is open. ' +
        "Roots take messages from the operator; a child only from its exact live direct parent (X-Agent-Token of the parent). " +
        'A message to a settled continuable child cold-resumes it; `resumed.agentToken` is its new token.',
      security: [...OPERATOR_SECURITY, ...AGENT_SECURITY],
      headers: IdempotencyHeaders,
      params: AgentIdParams,
      body: MessageBody,
      response: {
        202: MessageAccepted,
        ...errorResponses(['UNAUTHORIZED', 'AGENT_NOT_FOUND', 'NOT_RESUMABLE', 'ACTIVATION_CLOSING', 'ACTIVATION_SETUP_REVOKED', 'IDEMPOTENCY_CONFLICT', 'LIMIT_EXCEEDED', 'QUOTA_EXCEEDED', 'AGENT_BUSY', 'DRAINING', 'AT_CAPACITY']),
      },
    },
  }, async (request, reply) => {
    const { replayed, ...accepted } = await deliveries.deliver(
      request.params.id,
      agentToken(request),
      request.body.content,
      request.body.delivery,
      idempotencyOf(request),
    );
    markReplay(reply, replayed);
    return reply.status(202).send(accepted);
  });

  app.get('/v1/agents/:id/session', {
    schema: {
      tags: ['sessions'],
      operationId: 'getSession',
      summary: 'Read a session log',
      description: 'Works for any agent with a durable session, live or not.',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      querystring: SessionQuery,
      response: { 200: SessionPage, ...errorResponses(['AGENT_NOT_FOUND'], { bodyless: true }) },
    },
  }, async (request, reply) => {
    const page = await queries.sessionPage(request.params.id, request.query.after ?? 0, request.query.limit ?? 100);
    // Entries are a union by `type`; the schema documents them as one object with optional fields.
    return reply.send(page as never);
  });

  app.get('/v1/agents/:id/tools', {
    schema: {
      tags: ['tools'],
      operationId: 'listTools',
      summary: 'The service-owned tools this agent sees',
      security: AGENT_SECURITY,
      params: AgentIdParams,
      response: { 200: ToolList, ...errorResponses(['UNAUTHORIZED', 'AGENT_NOT_FOUND'], { bodyless: true }) },
    },
  }, async (request) => ({ tools: await protocol.toolsFor(request.params.id, agentToken(request)) }));

  app.post('/v1/agents/:id/tool-calls', {
    config: { toolCall: true },
    schema: {
      tags: ['tools'],
      operationId: 'callTool',
      summary: 'Execute a service-owned tool as this agent',
      description:
        'Errors add `toolResult`, the exact text to show the model. A call refused with a 4xx (an unknown tool, input the tool refuses, ' +
        'a report too large or not delivered) writes nothing to the session, not even as the result of an open step\'s call with the same ' +
        '`toolCallId`: post that result to the step\'s tool-results instead.',
      security: AGENT_SECURITY,
      headers: IdempotencyHeaders,
      params: AgentIdParams,
      body: ToolCallBody,
      response: {
        200: ToolCallResult,
        ...errorResponses(
          ['UNAUTHORIZED', 'AGENT_NOT_FOUND', 'TOOL_NOT_FOUND', 'PARENT_UNAVAILABLE', 'ACTIVATION_CLOSING', 'ACTIVATION_SETUP_REVOKED', 'NOT_RESUMABLE', 'CANCELLED', 'IDEMPOTENCY_CONFLICT', 'LIMIT_EXCEEDED', 'AGENT_BUSY', 'PARENT_BUSY', 'DRAINING', 'AT_CAPACITY'],
          { withToolResult: true },
        ),
      },
    },
  }, async (request, reply) => {
    const { replayed, toolCallId, isError, output, content, spawned, resumed } = await calls.callTool(request.params.id, agentToken(request), request.body, {
      signal: clientGone(reply),
      idem: idempotencyOf(request),
      // A refused request changes nothing: only a 5xx failure is still logged as the call and its error.
      writesFailure: (error) => !refusesRequest(error.code),
    });
    markReplay(reply, replayed);
    // The call's result, plus the credentials a backend needs of the children a call started or resumed.
    return { toolCallId, isError, output, content, ...(spawned === undefined ? {} : { spawned }), ...(resumed === undefined ? {} : { resumed }) };
  });
};
