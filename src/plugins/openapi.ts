/**
 * The OpenAPI document (served as JSON and YAML by @fastify/swagger, rendered at /docs): its
 * info, tags, security schemes and components. Operations come from the route schemas; the
 * wire contract's schemas (src/contract/) become `components.schemas` under their `$id`, and
 * operations refer to them with `$ref`. openapi.yaml is this document (`npm run openapi`).
 */
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { rootPlugin } from './root-plugin.js';

export const API_VERSION = '0.1.0';

/** Every tag an operation may carry, with what it groups. */
export const TAGS = [
  { name: 'agents', description: 'Root agents: create, list, read, dispose, resume; messages to an agent.' },
  { name: 'children', description: 'Children an agent starts, continuable or one-shot.' },
  { name: 'budgets', description: "Tree budgets: limits on what an agent's subtree spends, and the usage figures of a subtree." },
  { name: 'steps', description: 'The step protocol: a backend claims model requests and posts their output and tool results.' },
  { name: 'tools', description: 'Service-owned tools: what an agent sees, and calling them as the agent.' },
  { name: 'grants', description: 'Which tools an agent may call: granted down the tree, never wider than its parent.' },
  { name: 'tool-servers', description: 'MCP tool servers whose tools agents may be granted, run by the service.' },
  { name: 'tenants', description: 'Tenants (admin keys only): their keys, quotas and model keys. A tenant key sees and steers its own tenant only.' },
  { name: 'approvals', description: 'A person in the loop: rules that make tool calls wait for a decision, and the inbox of every approval.' },
  { name: 'sessions', description: 'The durable session log of an agent.' },
  { name: 'messages', description: 'Delivery receipts: where a message is.' },
  { name: 'events', description: 'Server-Sent Events of an agent or a forest.' },
  { name: 'packages', description: 'Tool packages: installed, configured, removed.' },
  { name: 'webhooks', description: 'Webhook subscriptions: events pushed to a URL, signed, at least once; their deliveries.' },
  { name: 'health', description: 'Liveness and readiness; no key needed.' },
  { name: 'operations', description: 'Metrics for operators.' },
] as const;

export type Tag = (typeof TAGS)[number]['name'];

export const openApi = rootPlugin<{ publicUrl?: string }>('openapi', async (app, { publicUrl }) => {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'agentforest',
        version: API_VERSION,
        description: 'Run forests of LLM agents: roots, continuable children and the child-scoped report tool.',
      },
      servers: [{ url: publicUrl ?? 'http://127.0.0.1:3000' }],
      tags: TAGS.map((tag) => ({ ...tag })),
      components: {
        securitySchemes: {
          operatorKey: { type: 'http', scheme: 'bearer', description: 'An operator key from AGENTFOREST_API_KEYS (when configured).' },
          agentToken: { type: 'apiKey', in: 'header', name: 'X-Agent-Token', description: "The live incarnation's agent token." },
        },
      },
    },
    // A shared schema's component is named by its `$id`.
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`) },
    transformObject: (document) => ('openapiObject' in document ? sharedErrorResponses(omittableBodies(document.openapiObject)) : document.swaggerObject),
  });
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { docExpansion: 'list', deepLinking: true } });
});

/**
 * A request without a body validates as `{}` (see src/plugins/json-bodies.ts), so a body whose
 * schema `{}` satisfies (an object requiring no property, and not a choice of forms) may be left
 * out. @fastify/swagger marks every request body required; this says which ones are not, so
 * generated clients do not demand them.
 */
function omittableBodies<T extends { paths?: object; components?: { schemas?: Record<string, BodySchema> } }>(document: T): T {
  const named = document.components?.schemas ?? {};
  for (const operations of Object.values(document.paths ?? {}) as Record<string, unknown>[]) {
    for (const operation of Object.values(operations)) {
      const body = (operation as { requestBody?: { required?: boolean; content?: Record<string, { schema?: BodySchema }> } } | null)?.requestBody;
      const schema = body?.content?.['application/json']?.schema;
      if (body !== undefined && schema !== undefined && takesEmptyObject(schema, named)) body.required = false;
    }
  }
  return document;
}

interface BodySchema {
  $ref?: string;
  type?: unknown;
  required?: unknown[];
  minProperties?: number;
  anyOf?: BodySchema[];
  oneOf?: BodySchema[];
}

/** Whether `{}` is a valid instance: an object requiring no property, or a choice of forms one of which is. */
function takesEmptyObject(schema: BodySchema, named: Record<string, BodySchema>): boolean {
  if (schema.$ref !== undefined) {
    const target = named[schema.$ref.replace('#/components/schemas/', '')];
    return target !== undefined && takesEmptyObject(target, named);
  }
  const choices = schema.anyOf ?? schema.oneOf;
  if (choices !== undefined) return choices.some((choice) => takesEmptyObject(choice, named));
  return (schema.type === undefined || schema.type === 'object') && (schema.required ?? []).length === 0 && (schema.minProperties ?? 0) === 0;
}

interface MediaObject {
  schema?: { description?: string; allOf?: { $ref?: string }[] };
}

interface ResponseObject {
  description?: string;
  content?: Record<string, MediaObject>;
  $ref?: string;
}

/**
 * Error responses are the shared error body narrowed to a few codes (see errorResponses in
 * src/routes/common-schemas.ts), and most operations answer the same ones. Each distinct one
 * is listed once, under `components.responses`, named after its codes (`AgentNotFound`,
 * `ToolCallValidation`), and operations refer to it.
 */
function sharedErrorResponses<T extends { paths?: object; components?: object }>(document: T): T {
  const shared: Record<string, ResponseObject> = {};
  for (const operations of Object.values(document.paths ?? {}) as Record<string, { responses?: Record<string, ResponseObject> }>[]) {
    for (const operation of Object.values(operations)) {
      for (const [status, response] of Object.entries(operation.responses ?? {})) {
        const schema = response.content?.['application/json']?.schema;
        const body = schema?.allOf?.[0]?.$ref;
        if (Number(status) < 400 || schema === undefined || body === undefined) continue;
        const codes = (schema.allOf?.[1] as { properties?: { code?: { enum?: string[] } } } | undefined)?.properties?.code?.enum ?? [];
        const name = `${body.endsWith('/ToolCallErrorBody') ? 'ToolCall' : ''}${codes.map(pascalCase).join('Or')}`;
        delete schema.description;
        shared[name] ??= response;
        operation.responses![status] = { $ref: `#/components/responses/${name}` };
      }
    }
  }
  const components = (document.components ?? {}) as { responses?: Record<string, ResponseObject> };
  components.responses = Object.fromEntries(Object.entries(shared).sort(([a], [b]) => a.localeCompare(b)));
  return document;
}

function pascalCase(code: string): string {
  return code.toLowerCase().replace(/(?:^|_)([a-z])/g, (_match, letter: string) => letter.toUpperCase());
}
