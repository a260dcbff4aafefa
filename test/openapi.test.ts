import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ERROR_CODES } from '../src/domain/errors.js';
import { generateOpenApi } from '../src/openapi-document.js';
import { HTTP_STATUS } from '../src/routes/error-status.js';

const committed = readFileSync(new URL('../openapi.yaml', import.meta.url), 'utf8');

interface Operation {
  responses: Record<string, { content?: { 'application/json'?: { schema?: { properties?: { code?: { enum?: string[] } } } } } }>;
  security?: unknown[];
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
    const doc = parse(committed) as { paths: Record<string, Record<string, Operation>> };
    const documented = new Set<string>();
    for (const [path, methods] of Object.entries(doc.paths)) {
      if (!path.startsWith('/v1/')) continue;
      for (const [method, op] of Object.entries(methods)) {
        expect(op.responses['401'], `${method} ${path} documents 401`).toBeDefined();
        expect(op.responses['400'], `${method} ${path} documents 400`).toBeDefined();
        expect(op.security, `${method} ${path} documents its security`).toBeDefined();
        for (const [status, response] of Object.entries(op.responses)) {
          const codes = response.content?.['application/json']?.schema?.properties?.code?.enum ?? [];
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

  it('marks a request body required only where the schema requires a field, since a missing body validates as {}', () => {
    type Body = { required: boolean; content: { 'application/json': { schema: { required?: string[]; additionalProperties?: boolean } } } };
    const doc = parse(committed) as { paths: Record<string, Record<string, { requestBody?: Body }>> };
    const required = (path: string, method: string): boolean | undefined => doc.paths[path]?.[method]?.requestBody?.required;
    // Bodies without fields are still documented, so unknown properties are rejected there too.
    for (const [path, method] of [['/v1/agents/{id}', 'delete'], ['/v1/agents/{id}/resume', 'post'], ['/v1/packages/{name}', 'delete']] as const) {
      expect(required(path, method), `${method} ${path}`).toBe(false);
      expect(doc.paths[path]![method]!.requestBody!.content['application/json'].schema.additionalProperties, `${method} ${path}`).toBe(false);
    }
    expect(required('/v1/agents', 'post')).toBe(false);
    expect(required('/v1/agents/{id}/messages', 'post')).toBe(true);
    for (const methods of Object.values(doc.paths)) {
      for (const op of Object.values(methods)) {
        if (op.requestBody === undefined) continue;
        const fields = op.requestBody.content['application/json'].schema.required ?? [];
        expect(op.requestBody.required).toBe(fields.length > 0);
      }
    }
  });
});
