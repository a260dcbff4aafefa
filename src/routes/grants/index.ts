/**
 * Grant routes: the tools an agent may call, read and set by the operator. Thin: parse, call
 * the service, shape.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { GrantsView, ref } from '../../contract/index.js';
import type { GrantChanges } from '../../tools/grant-changes.js';
import { AgentIdParams, errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import { GrantsBody } from './schemas.js';

export interface GrantRoutesOptions {
  grants: GrantChanges;
}

export const grantRoutes: FastifyPluginAsyncTypebox<GrantRoutesOptions> = async (app, { grants }) => {
  app.put('/v1/agents/:id/grants', {
    schema: {
      tags: ['grants'],
      operationId: 'putGrants',
      summary: "Set an agent's grants",
      description:
        'Replaces the tools the agent may call. A root may be granted any tool; a child only what its parent and every ancestor hold ' +
        '(400 VALIDATION names the first tool they lack), so the operator may widen a child up to its parent, never beyond. ' +
        'A tool taken from an agent is taken from every descendant at once, and vanishes from their next steps. ' +
        'Durable (a grants entry in the session). Answers the grants and the tools they come to.',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      body: GrantsBody,
      response: { 200: ref(GrantsView), ...errorResponses(['VALIDATION', 'AGENT_NOT_FOUND', 'NOT_RESUMABLE', 'ACTIVATION_CLOSING', 'AGENT_EXISTS']) },
    },
  }, async (request) => grants.change(request.params.id, request.body.grants));

  app.get('/v1/agents/:id/grants', {
    schema: {
      tags: ['grants'],
      operationId: 'getGrants',
      summary: "An agent's grants",
      description:
        "`grants`: its own; `effective`: the known tools it may call now (granted to it and every ancestor, installed, in its scope and toolFilter). " +
        'For an agent that is not live, `effective` is what its grants and toolFilter allow of the installed tools, without `report` (its scope is made when it runs).',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      response: { 200: ref(GrantsView), ...errorResponses(['AGENT_NOT_FOUND']) },
    },
  }, async (request) => grants.view(request.params.id));
};
