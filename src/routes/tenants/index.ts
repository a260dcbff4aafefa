/**
 * Tenants and their keys (admin keys only): make, read, change, delete; make and revoke keys.
 * Thin: parse, call the registry, shape.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { ServiceError } from '../../domain/errors.js';
import type { TenantFigures } from '../../tenants/tenant-metrics.js';
import type { Tenants } from '../../tenants/tenants.js';
import { clusterCaller } from '../cluster/index.js';
import { errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import { KeyCreated, KeyList, KeyParams, TenantBody, TenantChange, TenantList, TenantParams, TenantView, TenantWithUsage } from './schemas.js';

const ADMIN_ONLY = 'Admin keys only (a tenant key is answered 403 UNAUTHORIZED).';

export interface TenantRoutesOptions {
  tenants: Tenants;
  quotas: { figures(tenantId: string): TenantFigures };
  /** AGENTFOREST_API_KEYS holds a key: without one every keyless request is an admin's, and tenants would mean nothing. */
  adminKeys: boolean;
}

export const tenantRoutes: FastifyPluginAsyncTypebox<TenantRoutesOptions> = async (app, { tenants, quotas, adminKeys }) => {
  app.post('/v1/tenants', {
    schema: {
      tags: ['tenants'],
      operationId: 'createTenant',
      summary: 'Make a tenant',
      description:
        `${ADMIN_ONLY} Durable before answered. Give it keys with POST /v1/tenants/{id}/keys. Refused (403 UNAUTHORIZED) where ` +
        'AGENTFOREST_API_KEYS is empty: without an admin key, a request without a key would act as an admin.',
      security: OPERATOR_SECURITY,
      body: TenantBody,
      response: { 201: TenantView, ...errorResponses(['UNAUTHORIZED', 'TENANT_EXISTS']) },
    },
  }, async (request, reply) => {
    if (!adminKeys) throw new ServiceError('UNAUTHORIZED', 'tenants need an admin key: set AGENTFOREST_API_KEYS (without one, a request without a key acts as an admin)');
    const { id, ...change } = request.body;
    return reply.code(201).send(await tenants.create(id, change));
  });

  app.get('/v1/tenants', {
    schema: {
      tags: ['tenants'],
      operationId: 'listTenants',
      summary: 'The tenants',
      description: `${ADMIN_ONLY} By id.`,
      security: OPERATOR_SECURITY,
      response: { 200: TenantList, ...errorResponses(['UNAUTHORIZED']) },
    },
  }, async () => ({ items: tenants.list() }));

  app.get('/v1/tenants/:id', {
    schema: {
      tags: ['tenants'],
      operationId: 'getTenant',
      summary: 'One tenant, with what it uses now',
      description: `${ADMIN_ONLY} \`usage\`: its live agents and what it spent in the current windows, on every instance as this one knows (the others' figures are at most about a second old).`,
      security: OPERATOR_SECURITY,
      params: TenantParams,
      response: { 200: TenantWithUsage, ...errorResponses(['UNAUTHORIZED', 'TENANT_NOT_FOUND']) },
    },
  }, async (request) => ({ ...tenants.get(request.params.id), usage: quotas.figures(request.params.id) }));

  app.patch('/v1/tenants/:id', {
    schema: {
      tags: ['tenants'],
      operationId: 'changeTenant',
      summary: "Change a tenant's name, quotas or model keys",
      description: `${ADMIN_ONLY} Each field given replaces the stored one; a quota change holds on every instance within the settings' bound (2 s).`,
      security: OPERATOR_SECURITY,
      params: TenantParams,
      body: TenantChange,
      response: { 200: TenantView, ...errorResponses(['UNAUTHORIZED', 'TENANT_NOT_FOUND']) },
    },
  }, async (request) => tenants.change(request.params.id, request.body));

  app.delete('/v1/tenants/:id', {
    schema: {
      tags: ['tenants'],
      operationId: 'deleteTenant',
      summary: 'Delete a tenant',
      description: `${ADMIN_ONLY} Refused with 409 TENANT_NOT_EMPTY while it has live agents. Its keys are revoked; what it made stays stored, for an admin.`,
      security: OPERATOR_SECURITY,
      params: TenantParams,
      response: { 204: Type.Null({ description: 'Deleted.' }), ...errorResponses(['UNAUTHORIZED', 'TENANT_NOT_FOUND', 'TENANT_NOT_EMPTY']) },
    },
  }, async (request, reply) => {
    await tenants.delete(request.params.id, clusterCaller(request));
    return reply.code(204).send(null);
  });

  app.post('/v1/tenants/:id/keys', {
    schema: {
      tags: ['tenants'],
      operationId: 'createTenantKey',
      summary: 'Make a key for a tenant',
      description: `${ADMIN_ONLY} The key is in this answer only: the service keeps its SHA-256 alone. Durable before answered.`,
      security: OPERATOR_SECURITY,
      params: TenantParams,
      response: { 201: KeyCreated, ...errorResponses(['UNAUTHORIZED', 'TENANT_NOT_FOUND']) },
    },
  }, async (request, reply) => reply.code(201).send(await tenants.createKey(request.params.id)));

  app.get('/v1/tenants/:id/keys', {
    schema: {
      tags: ['tenants'],
      operationId: 'listTenantKeys',
      summary: "A tenant's keys (their ids, never the keys)",
      description: ADMIN_ONLY,
      security: OPERATOR_SECURITY,
      params: TenantParams,
      response: { 200: KeyList, ...errorResponses(['UNAUTHORIZED', 'TENANT_NOT_FOUND']) },
    },
  }, async (request) => {
    tenants.get(request.params.id);
    return { items: tenants.keysOf(request.params.id) };
  });

  app.delete('/v1/tenants/:id/keys/:keyId', {
    schema: {
      tags: ['tenants'],
      operationId: 'revokeTenantKey',
      summary: 'Revoke a tenant key',
      description:
        `${ADMIN_ONLY} Refused here from the answer on (401 UNAUTHENTICATED), and on every other instance within the settings' bound ` +
        '(at once when the announcement arrives; 2 s at the latest).',
      security: OPERATOR_SECURITY,
      params: KeyParams,
      response: { 204: Type.Null({ description: 'Revoked.' }), ...errorResponses(['UNAUTHORIZED', 'TENANT_NOT_FOUND', 'TENANT_KEY_NOT_FOUND']) },
    },
  }, async (request, reply) => {
    await tenants.revokeKey(request.params.id, request.params.keyId);
    return reply.code(204).send(null);
  });
};
