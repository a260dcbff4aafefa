import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { parse } from 'yaml';
import { ERROR_CODES } from '../src/domain/errors.js';
import { generateOpenApi } from '../src/openapi-document.js';
import { HTTP_STATUS } from '../src/routes/error-status.js';

const committed = readFileSync(new URL('../openapi.yaml', import.meta.url), 'utf8');

interface ErrorSchema {
  allOf?: [{ $ref: string }, { properties?: { code?: { enum?: string[] } } }];
}

interface Response {
  $ref?: string;
  content?: { 'application/json'?: { schema?: ErrorSchema } };
}

interface Operation {
  operationId?: string;
  tags?: string[];
  responses: Record<string, Response>;
  security?: unknown[];
}

interface Document {
  paths: Record<string, Record<string, Operation>>;
  tags: { name: string; description?: string }[];
  components: { responses: Record<string, Response>; schemas: Record<string, unknown> };
}

/** A response as written, or the shared one it refers to. */
function resolved(doc: Document, response: Response): Response {
  const name = response.$ref?.replace('#/components/responses/', '');
  return name === undefined ? response : (doc.components.responses[name] ?? {});
}

describe('openapi.yaml', () => {
  it('matches what the app generates from its route schemas (run `npm run openapi` after a change)', async () => {
    expect(await generateOpenApi()).toBe(committed);
  });

  it('is OpenAPI 3.1 with a servers entry', () => {
    const doc = parse(committed) as { openapi: string; servers: unknown[] };
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.servers.length).toBeGreaterThan(0);
  });

  it('documents every error response of every /v1 route with its codes, each under its own status', () => {
    const doc = parse(committed) as Document;
    const documented = new Set<string>();
    for (const [path, methods] of Object.entries(doc.paths)) {
      if (!path.startsWith('/v1/')) continue;
      for (const [method, op] of Object.entries(methods)) {
        expect(op.responses['401'], `${method} ${path} documents 401`).toBeDefined();
        expect(op.responses['400'], `${method} ${path} documents 400`).toBeDefined();
        expect(op.security, `${method} ${path} documents its security`).toBeDefined();
        for (const [status, response] of Object.entries(op.responses)) {
          const schema = resolved(doc, response).content?.['application/json']?.schema;
          if (Number(status) >= 400) expect(schema?.allOf?.[0].$ref, `${status} of ${method} ${path} is the shared error body`).toMatch(/^#\/components\/schemas\/(ToolCall)?ErrorBody$/);
          const codes = schema?.allOf?.[1].properties?.code?.enum ?? [];
          for (const code of codes) {
            expect(HTTP_STATUS[code as keyof typeof HTTP_STATUS], `${code} under ${status} of ${method} ${path}`).toBe(Number(status));
            documented.add(code);
          }
        }
      }
    }
    // Every code a /v1 route can produce is documented somewhere, and nothing undocumented exists.
    const routeCodes = ERROR_CODES.filter((c) => c !== 'ROUTE_NOT_FOUND' && c !== 'PARENT_UNAVAILABLE' && c !== 'ACTIVATION_CLOSING' && c !== 'ACTIVATION_SETUP_REVOKED' && c !== 'ACTIVATION_SETUP_RELEASE_FAILED' && c !== 'NOT_RESUMABLE' && c !== 'FOREST_FENCED');
    for (const code of routeCodes) expect(documented, code).toContain(code);
  });

  it('marks a request body required exactly where its schema refuses {}, since a missing body validates as {}', () => {
    type Body = { required: boolean; content: { 'application/json': { schema: { required?: string[]; additionalProperties?: boolean } } } };
    const doc = parse(committed) as { paths: Record<string, Record<string, { requestBody?: Body }>>; components: object };
    const required = (path: string, method: string): boolean | undefined => doc.paths[path]?.[method]?.requestBody?.required;
    // Bodies without fields are still documented, so unknown properties are rejected there too.
    for (const [path, method] of [['/v1/agents/{id}', 'delete'], ['/v1/agents/{id}/resume', 'post'], ['/v1/packages/{name}', 'delete']] as const) {
      expect(required(path, method), `${method} ${path}`).toBe(false);
      expect(doc.paths[path]![method]!.requestBody!.content['application/json'].schema.additionalProperties, `${method} ${path}`).toBe(false);
    }
    expect(required('/v1/agents', 'post')).toBe(false);
    expect(required('/v1/agents/{id}/messages', 'post')).toBe(true);
    // A choice of forms is required unless one of them takes {}; a named schema is looked up.
    expect(required('/v1/agents/{id}/steps/{stepId}/output', 'post')).toBe(false);
    expect(required('/v1/agents/{id}/steps/{stepId}/deltas', 'post')).toBe(true);
    expect(required('/v1/backend-tools/{name}', 'put')).toBe(true);
    const ajv = new Ajv2020({ strict: false, validateFormats: false });
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        if (op.requestBody === undefined) continue;
        const takesEmpty = ajv.compile({ ...op.requestBody.content['application/json'].schema, components: doc.components });
        expect(op.requestBody.required, `${method} ${path}`).toBe(!takesEmpty({}));
      }
    }
  });

  it('names every operation with a unique camelCase operationId and tags it with a described tag', () => {
    const doc = parse(committed) as Document;
    const described = new Set(doc.tags.filter((t) => (t.description ?? '') !== '').map((t) => t.name));
    const ids: string[] = [];
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        expect(op.operationId, `${method} ${path}`).toMatch(/^[a-z][A-Za-z]+$/);
        ids.push(op.operationId ?? '');
        expect(op.tags?.length, `${method} ${path} has tags`).toBeGreaterThan(0);
        for (const tag of op.tags ?? []) expect(described, `${method} ${path}: tag ${tag}`).toContain(tag);
        expect(op.security, `${method} ${path} states its security`).toBeDefined();
      }
    }
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('lists the shared shapes once, as components the operations refer to', () => {
    const doc = parse(committed) as Document;
    for (const name of ['ErrorBody', 'ToolCallErrorBody', 'AgentView', 'SessionEntry', 'MessageEntry', 'Step', 'ToolResult', 'ModelSpec']) {
      expect(doc.components.schemas, name).toHaveProperty(name);
      expect(committed, name).toContain(`$ref: "#/components/schemas/${name}"`);
    }
    expect(committed).not.toContain('def-');
  });

  it('passes the recommended Redocly lint rules with no error and no warning (redocly.yaml)', () => {
    const root = fileURLToPath(new URL('..', import.meta.url));
    const out = execFileSync(`${root}node_modules/.bin/redocly`, ['lint', '--format=json', 'openapi.yaml'], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const report = JSON.parse(out) as { totals: { errors: number; warnings: number }; problems: { ruleId: string; message: string }[] };
    expect(report.problems.map((p) => `${p.ruleId}: ${p.message}`)).toEqual([]);
    expect(report.totals).toMatchObject({ errors: 0, warnings: 0 });
  }, 60_000);
});
