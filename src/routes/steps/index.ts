/**
 * Step routes: an agent's driver claims its next model request (long-poll), posts the model's
 * output and the results of its own tools; a worker pool claims any agent's next step.
 */
import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply } from 'fastify';
import type { Topology } from '../../topology/topology.js';
import type { Compactions } from '../../steps/compactions.js';
import type { StepProtocol } from '../../steps/step-protocol.js';
import { stepJsonPieces } from '../../steps/rendered-step.js';
import { agentToken } from '../auth.js';
import { clientGone } from '../client-gone.js';
import { tenantOf } from '../auth.js';
import { clusterCaller } from '../cluster/index.js';
import { AGENT_SECURITY, AgentIdParams, EmptyBody, errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import {
  ClaimBody,
  ClaimResult,
  CompactionBody,
  CompactionEntry,
  DeltasBody,
  DeltasResult,
  HeartbeatResult,
  OutputBody,
  OutputResult,
  PoolClaimBody,
  PoolClaimResult,
  StepAttemptHeaders,
  StepParams,
  ToolResultsBody,
  ToolResultsResult,
} from './schemas.js';

export interface StepRoutesOptions {
  protocol: Pick<StepProtocol, 'claimStep' | 'postOutput' | 'postDeltas' | 'heartbeat' | 'postToolResults'>;
  compactions: Pick<Compactions, 'post'>;
  /** The worker pool: this instance's, or with several instances every instance's. */
  topology: Pick<Topology, 'claimFromPool'>;
}

/** A step is sent as the JSON the step cache rendered (see src/steps/rendered-step.ts). */
const JSON_TYPE = 'application/json; charset=utf-8';
/** Above this size a step is streamed piece by piece rather than copied into one buffer. */
const STREAM_FROM_BYTES = 64 * 1024;

/** Send JSON pieces in order: small ones as one buffer, large ones streamed without a copy. */
function sendPieces(reply: FastifyReply, pieces: Buffer[]): FastifyReply {
  const length = pieces.reduce((n, piece) => n + piece.length, 0);
  reply.type(JSON_TYPE);
  if (length < STREAM_FROM_BYTES) return reply.send(Buffer.concat(pieces, length));
  return reply.header('content-length', length).send(Readable.from(pieces));
}

const noStep = { description: 'No step became claimable within waitMs (or the service is draining).', type: 'null' } as const;

export const stepRoutes: FastifyPluginAsyncTypebox<StepRoutesOptions> = async (app, { protocol, compactions, topology }) => {
  app.post('/v1/agents/:id/steps/next', {
    schema: {
      tags: ['steps'],
      operationId: 'claimStep',
      summary: "Claim this agent's next model request",
      description:
        'Long-polls up to waitMs (at most 60000); wakes at once when a step becomes claimable. An empty body means waitMs 0. ' +
        "With `since` (the id of this agent's earlier step whose messages the caller holds), the step carries `messagesSince` instead of `messages`. " +
        "409 BUDGET_EXHAUSTED while the agent's budget or an ancestor's is spent (also when that happens during the long-poll).",
      security: AGENT_SECURITY,
      params: AgentIdParams,
      body: ClaimBody,
      response: { 200: ClaimResult, 204: noStep, ...errorResponses(['UNAUTHORIZED', 'AGENT_NOT_FOUND', 'STEP_CONFLICT', 'BUDGET_EXHAUSTED', 'QUOTA_EXCEEDED', 'AGENT_BUSY', 'DRAINING']) },
    },
  }, async (request, reply) => {
    const step = await protocol.claimStep(request.params.id, agentToken(request), request.body.waitMs ?? 0, clientGone(reply), request.body.since);
    if (step === null) return reply.status(204).send();
    return sendPieces(reply, stepJsonPieces(step));
  });

  app.post('/v1/steps/next', {
    schema: {
      tags: ['steps'],
      operationId: 'claimAnyStep',
      summary: "Claim any agent's next step (worker pool)",
      description:
        'FIFO by when each step became claimable; `rootId` keeps to one forest. Each step is claimed by exactly one caller. ' +
        'The response carries the agent token for the step protocol calls that follow. `since` works as for one agent\'s claim, when it names a step of the agent claimed.',
      security: OPERATOR_SECURITY,
      body: PoolClaimBody,
      response: { 200: PoolClaimResult, 204: noStep, ...errorResponses(['DRAINING']) },
    },
  }, async (request, reply) => {
    const { waitMs = 0, rootId, since } = request.body;
    // A tenant key's worker is handed its own tenant's steps only.
    const tenantId = tenantOf(request);
    const scope = { ...(rootId === undefined ? {} : { rootId }), ...(tenantId === undefined ? {} : { tenantId }) };
    const claim = await topology.claimFromPool(waitMs, scope, clientGone(reply), since, clusterCaller(request));
    if (claim === null) return reply.status(204).send();
    // Another instance's answer is already this route's JSON.
    if ('forwarded' in claim) return reply.type(JSON_TYPE).send(claim.forwarded);
    const claimed = claim.local;
    return sendPieces(reply, stepJsonPieces(claimed.step, { agentId: claimed.agentId, agentToken: claimed.agentToken }));
  });

  app.post('/v1/agents/:id/steps/:stepId/output', {
    schema: {
      tags: ['steps'],
      operationId: 'postStepOutput',
      summary: "Post the model's answer to a step",
      description:
        "In the service's form, or as the chat-completions assistant message the model returned (tool call arguments as JSON text; " +
        'a call whose arguments are not JSON gets an error result and is not run). ' +
        'Service-owned tool calls run at once (`toolResults`); the backend\'s own calls are listed as `awaiting`. ' +
        'An output without tool calls ends the turn.',
      security: AGENT_SECURITY,
      params: StepParams,
      headers: StepAttemptHeaders,
      body: OutputBody,
      response: { 200: OutputResult, ...errorResponses(['UNAUTHORIZED', 'AGENT_NOT_FOUND', 'STEP_NOT_FOUND', 'STEP_CONFLICT']) },
    },
  }, async (request) => protocol.postOutput(request.params.id, agentToken(request), request.params.stepId, request.body, request.headers['x-step-attempt']));

  app.post('/v1/agents/:id/steps/:stepId/deltas', {
    schema: {
      tags: ['steps'],
      operationId: 'postStepDeltas',
      summary: 'Publish pieces of the answer being written',
      description:
        'While the claim named by X-Step-Attempt (absent: 1) holds the step and before its output, publishes each piece as an ' +
        '`event: delta` on the agent\'s and the forest\'s event streams that ask for deltas (`?deltas=true`), with the step, the ' +
        'attempt and `seq` (from 1 per step attempt). Deltas are not written to the session and not replayed; the output posted ' +
        'afterwards is what is recorded. A driven agent\'s deltas are the built-in driver\'s own.',
      security: AGENT_SECURITY,
      params: StepParams,
      headers: StepAttemptHeaders,
      body: DeltasBody,
      response: { 200: DeltasResult, ...errorResponses(['UNAUTHORIZED', 'AGENT_NOT_FOUND', 'STEP_NOT_FOUND', 'STEP_CONFLICT']) },
    },
  }, async (request) => {
    const pieces = Array.isArray(request.body) ? request.body : [request.body];
    return protocol.postDeltas(request.params.id, agentToken(request), request.params.stepId, pieces, request.headers['x-step-attempt']);
  });

  app.post('/v1/agents/:id/steps/:stepId/heartbeat', {
    schema: {
      tags: ['steps'],
      operationId: 'heartbeatStep',
      summary: "Renew a claimed step's lease",
      description:
        'Extends the lease of the claim named by X-Step-Attempt (absent: 1) by the lease length. A claim whose lease ' +
        'expired gets STEP_CONFLICT: the step was (or will be) claimed again as the next attempt.',
      security: AGENT_SECURITY,
      params: StepParams,
      headers: StepAttemptHeaders,
      body: EmptyBody,
      response: { 200: HeartbeatResult, ...errorResponses(['UNAUTHORIZED', 'AGENT_NOT_FOUND', 'STEP_NOT_FOUND', 'STEP_CONFLICT']) },
    },
  }, async (request) => protocol.heartbeat(request.params.id, agentToken(request), request.params.stepId, request.headers['x-step-attempt']));

  app.post('/v1/agents/:id/steps/:stepId/tool-results', {
    schema: {
      tags: ['steps'],
      operationId: 'postToolResults',
      summary: "Post results of the backend's own tool calls",
      description: 'Once every call of the step has a result, the next step is claimable. A request naming any call the step does not await changes nothing.',
      security: AGENT_SECURITY,
      params: StepParams,
      headers: StepAttemptHeaders,
      body: ToolResultsBody,
      response: { 200: ToolResultsResult, ...errorResponses(['UNAUTHORIZED', 'AGENT_NOT_FOUND', 'STEP_NOT_FOUND', 'STEP_CONFLICT']) },
    },
  }, async (request) =>
    protocol.postToolResults(request.params.id, agentToken(request), request.params.stepId, request.body.results, request.headers['x-step-attempt']));

  app.post('/v1/agents/:id/compactions', {
    schema: {
      tags: ['steps'],
      operationId: 'postCompaction',
      summary: "Summarise an agent's conversation so far",
      description:
        'Writes a compaction entry: later steps start with the instructions and one user message carrying `summary`, then only ' +
        'what follows `throughSeq`. Taken between steps (none claimed or awaiting tool results). The session keeps every entry. ' +
        'A live agent needs its token; a session that is not resident (a settled child) is compacted by the operator alone.',
      security: AGENT_SECURITY,
      params: AgentIdParams,
      body: CompactionBody,
      response: { 201: CompactionEntry, ...errorResponses(['VALIDATION', 'UNAUTHORIZED', 'AGENT_NOT_FOUND', 'AGENT_EXISTS', 'STEP_CONFLICT', 'NOT_RESUMABLE', 'AT_CAPACITY']) },
    },
  }, async (request, reply) => reply.status(201).send(await compactions.post(request.params.id, agentToken(request), request.body)));
};
