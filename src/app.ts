/**
 * buildApp(deps): the Fastify application as a plugin tree: validation, error handling,
 * operator auth, OpenAPI and the routes. It never listens; server.ts does.
 */
import { randomUUID } from 'node:crypto';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Ajv } from 'ajv';
import { MESSAGES, ServiceError } from './domain/errors.js';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import type { Logger } from 'pino';
import { registerOperatorAuth } from './routes/auth.js';
import { agentRoutes } from './routes/agents/index.js';
import { errorBody, registerErrorHandling, type ErrorBody } from './routes/errors.js';
import { benchBaselineRoutes } from './routes/bench/index.js';
import { registerProtection, type ProtectionOptions } from './routes/protection.js';
import { healthRoutes } from './routes/health/index.js';
import { stepRoutes } from './routes/steps/index.js';
import type { System } from './services/system.js';
import { childRoutes } from './routes/children/index.js';
import { eventRoutes } from './routes/events/index.js';
import { messageRoutes } from './routes/messages/index.js';
import { metricsRoutes } from './routes/metrics/index.js';
import { packageRoutes } from './routes/packages/index.js';

export interface AppDeps {
  system: Pick<System, 'agents' | 'steps' | 'packages' | 'streams' | 'hub' | 'metrics'> & Partial<Pick<System, 'ownership'>>;
  logger: Logger;
  apiKeys?: readonly string[];
  bodyLimit?: number;
  /** Event streams: heartbeat interval and how far a consumer may fall behind (bytes). */
  eventHeartbeatMs?: number;
  eventBufferBytes?: number;
  /** Register the hidden benchmark baseline route (bench/ only). */
  benchBaseline?: boolean;
  /** Rate limit on operator routes and the overload guard (both off when omitted). */
  protection?: ProtectionOptions;
  /** The URL advertised in the OpenAPI `servers` entry. */
  publicUrl?: string;
}

export const API_VERSION = '0.1.0';

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: deps.bodyLimit ?? 1_048_576,
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.:-]{1,128}$/.test(given) ? given : randomUUID();
    },
    // Requests that arrive while closing are refused in the service's own shape (closeGracefully).
    return503OnClosing: false,
    // Ids may be 128 characters; longer ones must reach validation (400), not the router's 414.
    routerOptions: { maxParamLength: 256 },
    forceCloseConnections: 'idle',
    // Malformed percent-encoding and over-long path parameters are client errors in our shape.
    frameworkErrors: (error, request, reply) => {
      const body: ErrorBody = errorBody('VALIDATION', error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'a path parameter is too long' : 'the URL is not validly encoded');
      // These errors skip the error handler, so a tool-call route's toolResult is added here.
      if (/^[^?]*\/tool-calls(?:\?|$)/.test(request.url)) body.toolResult = { isError: true, content: `Error: ${body.message}` };
      void (reply as FastifyReply).status(body.statusCode).send(body);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  configureValidation(app);
  configureJsonBodies(app);
  closeGracefully(app);
  // Response schemas document the contract; bodies are written with JSON.stringify so a
  // schema can never silently drop a field.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  app.addHook('onSend', async (request, reply) => {
    void reply.header('x-request-id', request.id);
  });
  const { metrics } = deps.system;
  app.addHook('onResponse', async (request, reply) => {
    metrics.httpRequest(request.method, request.routeOptions.url ?? 'unmatched', reply.statusCode, reply.elapsedTime / 1000);
  });
  registerErrorHandling(app);
  await registerProtection(app, deps.protection ?? {});
  registerOperatorAuth(app, deps.apiKeys ?? []);
  // Several instances: a request for an agent whose forest another instance owns goes there.
  // Registered only then: on a single instance it would add an await to every agent request.
  const { agents: agentService } = deps.system;
  if (deps.system.ownership !== undefined) {
    app.addHook('preHandler', async (request) => {
      const id = (request.params as { id?: unknown } | undefined)?.id;
      if (typeof id !== 'string') return;
      const owner = await agentService.misdirection(id);
      if (owner !== undefined) {
        throw new ServiceError('MISDIRECTED', `agent "${id}" belongs to a forest owned by the instance at ${owner}; send the request there`, { location: owner });
      }
    });
  }

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'agentforest',
        version: API_VERSION,
        description: 'Run forests of LLM agents: roots, continuable children and the child-scoped report tool.',
      },
      servers: [{ url: deps.publicUrl ?? 'http://127.0.0.1:3000' }],
      components: {
        securitySchemes: {
          operatorKey: { type: 'http', scheme: 'bearer', description: 'An operator key from AGENTFOREST_API_KEYS (when configured).' },
          agentToken: { type: 'apiKey', in: 'header', name: 'X-Agent-Token', description: "The live incarnation's agent token." },
        },
      },
    },
    transformObject: (document) => ('openapiObject' in document ? omittableBodies(document.openapiObject) : document.swaggerObject),
  });

  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { docExpansion: 'list', deepLinking: true } });
  const { agents, steps, packages, streams, hub } = deps.system;
  await app.register(healthRoutes, { agents });
  if (deps.benchBaseline === true) await app.register(benchBaselineRoutes);
  await app.register(agentRoutes, { agents, steps });
  await app.register(childRoutes, { agents });
  await app.register(stepRoutes, { steps });
  await app.register(messageRoutes, { agents });
  await app.register(eventRoutes, {
    streams,
    hub,
    heartbeatMs: deps.eventHeartbeatMs ?? 15_000,
    maxBufferedBytes: deps.eventBufferBytes ?? 1_048_576,
  });
  await app.register(packageRoutes, { packages });
  await app.register(metricsRoutes, { metrics });
  return app;
}

/**
 * A request without a body validates as `{}` (see configureJsonBodies), so a body whose schema
 * requires no property may be left out. @fastify/swagger marks every request body required;
 * this says which ones are not, so generated clients do not demand them.
 */
function omittableBodies<T extends { paths?: object }>(document: T): T {
  for (const operations of Object.values(document.paths ?? {}) as Record<string, unknown>[]) {
    for (const operation of Object.values(operations)) {
      const body = (operation as { requestBody?: { required?: boolean; content?: Record<string, { schema?: { required?: unknown[] } }> } } | null)?.requestBody;
      const schema = body?.content?.['application/json']?.schema;
      if (body !== undefined && schema !== undefined && (schema.required ?? []).length === 0) body.required = false;
    }
  }
  return document;
}

/**
 * Closing waits for every connection to end. `forceCloseConnections: 'idle'` closes the idle
 * ones once, when closing starts; a keep-alive connection still answering a request then
 * stays open after its response, until its keep-alive timeout (72 s), and the process with
 * it. Until the server has closed, connections are closed as soon as they fall idle.
 *
 * Requests that still arrive on open connections meanwhile are refused as DRAINING (Fastify
 * answers them `Connection: close`). Fastify's own 503 for them had no `code`, and no
 * `toolResult` on a tool call.
 */
function closeGracefully(app: FastifyInstance): void {
  let closing = false;
  let sweep: NodeJS.Timeout | undefined;
  // A callback hook: every request passes here, and an async one costs a promise each.
  app.addHook('onRequest', (_request, _reply, done) => {
    done(closing ? new ServiceError('DRAINING', MESSAGES.draining) : undefined);
  });
  app.addHook('preClose', async () => {
    closing = true;
    sweep = setInterval(() => app.server.closeIdleConnections(), 50);
    sweep.unref();
  });
  // onClose hooks run once the server has closed.
  app.addHook('onClose', async () => clearInterval(sweep));
}

/**
 * Bodies are validated strictly (no coercion, unknown properties rejected by the schemas);
 * querystrings and params coerce, since they arrive as text.
 */
function configureValidation(app: FastifyInstance): void {
  const strict = new Ajv({ coerceTypes: false, removeAdditional: false, useDefaults: true, allErrors: false, strict: false });
  const lenient = new Ajv({ coerceTypes: true, removeAdditional: false, useDefaults: true, allErrors: false, strict: false });
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? strict : lenient).compile(schema));
}

const MAX_JSON_DEPTH = 64;

/** True when `value` has arrays or objects nested deeper than `limit` (checked without recursion). */
function nestingExceeds(value: unknown, limit: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    if (depth > limit) return true;
    for (const child of Object.values(node as Record<string, unknown>)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
  return false;
}

/** JSON bodies via Fastify's safe parser (prototype poisoning is an error); an empty body is no body. */
function configureJsonBodies(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  // JSON only: any other content type is 415, not parsed as text and then failed as VALIDATION.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string;
    // No route: the 404 says so, whatever the body holds.
    if (text.trim() === '' || request.is404) {
      done(null, undefined);
      return;
    }
    void parse(request, text, (error: Error | null, body?: unknown) => {
      if (error !== null) return done(error);
      // Deep nesting parses, but later serialization of it would overflow the stack.
      if (nestingExceeds(body, MAX_JSON_DEPTH)) {
        return done(new ServiceError('VALIDATION', `body nests deeper than ${MAX_JSON_DEPTH} levels`));
      }
      done(null, body);
    });
  });
  // A request without a body validates as `{}`, so optional bodies may be omitted.
  app.addHook('preValidation', async (request) => {
    if (request.body === undefined && (request.method === 'POST' || request.method === 'PUT' || request.method === 'DELETE')) request.body = {};
  });
}
