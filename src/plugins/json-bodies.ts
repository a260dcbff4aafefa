/**
 * JSON in and out. Request bodies: JSON only (any other content type is 415), uncompressed (a
 * content coding other than `identity` is 415 too), parsed by Fastify's safe parser (prototype
 * poisoning is an error), nested at most MAX_JSON_DEPTH deep, and well-formed Unicode (no lone
 * surrogate in any string); see body-refusals.ts for what each refusal says. An empty body is
 * no body, and a body-taking request without one validates as `{}`.
 * Validation: bodies strictly (no coercion, unknown properties rejected by the schemas),
 * querystrings, params and headers with coercion, since they arrive as text; both resolve
 * `$ref`s to the schemas shared with `addSchema` (src/contract/). Responses are written with
 * JSON.stringify, so a response schema documents the contract but can never silently drop a
 * field.
 */
import { Ajv } from 'ajv';
import type { FastifyInstance } from 'fastify';
import { ServiceError } from '../domain/errors.js';
import { loneSurrogate, refusedBodyReason, unsupportedEncoding } from './body-refusals.js';
import { rootPlugin } from './root-plugin.js';

export const MAX_JSON_DEPTH = 64;

export const jsonBodies = rootPlugin('json-bodies', async (app) => {
  configureValidation(app);
  configureParsing(app);
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
});

function configureValidation(app: FastifyInstance): void {
  const strict = new Ajv({ coerceTypes: false, removeAdditional: false, useDefaults: true, allErrors: false, strict: false });
  const lenient = new Ajv({ coerceTypes: true, removeAdditional: false, useDefaults: true, allErrors: false, strict: false });
  // Routes compile when the app is ready, after every shared schema was added.
  let shared = false;
  app.setValidatorCompiler(({ schema, httpPart }) => {
    if (!shared) {
      for (const added of Object.values(app.getSchemas())) for (const ajv of [strict, lenient]) ajv.addSchema(added as object);
      shared = true;
    }
    return (httpPart === 'body' ? strict : lenient).compile(schema);
  });
}

/** True when `value` has arrays or objects nested deeper than `limit` (checked without recursion). */
export function nestingExceeds(value: unknown, limit: number): boolean {
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

function configureParsing(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string;
    // No route: the 404 says so, whatever the body holds.
    if (text.trim() === '' || request.is404) {
      done(null, undefined);
      return;
    }
    const encoding = unsupportedEncoding(request.headers['content-encoding']);
    if (encoding !== undefined) {
      done(new ServiceError('UNSUPPORTED_MEDIA_TYPE', encoding));
      return;
    }
    void parse(request, text, (error: Error | null, body?: unknown) => {
      if (error !== null) {
        // Said why when it is more than malformed JSON (the reason is looked for only now).
        const reason = refusedBodyReason(text);
        return done(reason === undefined ? error : new ServiceError('VALIDATION', reason));
      }
      // Deep nesting parses, but later serialization of it would overflow the stack.
      if (nestingExceeds(body, MAX_JSON_DEPTH)) {
        return done(new ServiceError('VALIDATION', `body nests deeper than ${MAX_JSON_DEPTH} levels`));
      }
      const surrogate = loneSurrogate(text, body);
      if (surrogate !== undefined) return done(new ServiceError('VALIDATION', surrogate));
      done(null, body);
    });
  });
  // A callback hook: every request passes here, and an async one costs a promise each.
  app.addHook('preValidation', (request, _reply, done) => {
    if (request.body === undefined && (request.method === 'POST' || request.method === 'PUT' || request.method === 'DELETE')) request.body = {};
    done();
  });
}
