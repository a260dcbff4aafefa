/**
 * What the OpenAPI document promises, read from the running app's own document
 * (`app.swagger()`, which test/openapi.test.ts keeps equal to openapi.yaml): every operation
 * with its parameters, body schema, security and documented responses, and a checker that
 * tells whether one response keeps those promises. Nothing here knows a route by name; the
 * fuzzer learns the API from the document alone.
 */
import { STATUS_CODES } from 'node:http';
import { Ajv, type ValidateFunction } from 'ajv';

export interface JsonSchema {
  type?: string;
  enum?: unknown[];
  anyOf?: JsonSchema[];
  allOf?: JsonSchema[];
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  items?: JsonSchema;
  minItems?: number;
  maxItems?: number;
}

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'DELETE';

export interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required: boolean;
  schema: JsonSchema;
}

export interface DocumentedResponse {
  /** The JSON schema of the body, when the response has a JSON body. */
  schema: JsonSchema | undefined;
  /** The media type the document gives the body (`application/json`, `text/event-stream`). */
  mediaType: string | undefined;
}

export interface Operation {
  /** `METHOD /path/{template}`, as the document spells it. */
  key: string;
  method: HttpMethod;
  path: string;
  params: Parameter[];
  body: JsonSchema | undefined;
  /** Some security alternative asks for an operator key / an agent token. */
  operatorKey: boolean;
  agentToken: boolean;
  responses: Record<string, DocumentedResponse>;
  /** The route's error schemas carry the model-visible `toolResult`. */
  toolCall: boolean;
  /** The success response is an event stream, not a JSON body. */
  streams: boolean;
}

/**
 * The document with every local `$ref` (`#/components/...`) replaced by what it points at, so
 * that an operation reads as a whole; keywords beside a `$ref` (a description) are kept.
 */
export function dereferenced<T>(doc: T): T {
  const root = doc as unknown;
  const target = (ref: string): unknown =>
    ref
      .slice(2)
      .split('/')
      .reduce<unknown>((node, key) => (node as Record<string, unknown> | undefined)?.[key.replace(/~1/g, '/').replace(/~0/g, '~')], root);
  const walk = (node: unknown, seen: readonly string[]): unknown => {
    if (Array.isArray(node)) return node.map((item) => walk(item, seen));
    if (node === null || typeof node !== 'object') return node;
    const { $ref, ...rest } = node as { $ref?: unknown } & Record<string, unknown>;
    const own = Object.fromEntries(Object.entries(rest).map(([key, value]) => [key, walk(value, seen)]));
    if (typeof $ref !== 'string' || !$ref.startsWith('#/')) return $ref === undefined ? own : { $ref, ...own };
    if (seen.includes($ref)) throw new Error(`circular $ref ${$ref}`);
    return { ...(walk(target($ref), [...seen, $ref]) as object), ...own };
  };
  return walk(root, []) as T;
}

/** The properties a schema declares, its `allOf` parts' included. */
function declaredProperties(schema: JsonSchema | undefined): Record<string, JsonSchema> {
  return Object.assign({}, ...(schema?.allOf ?? []).map(declaredProperties), schema?.properties);
}

interface RawOperation {
  parameters?: { name: string; in: string; required?: boolean; schema: JsonSchema }[];
  requestBody?: { content?: Record<string, { schema?: JsonSchema }> };
  security?: Record<string, unknown>[];
  responses?: Record<string, { content?: Record<string, { schema?: JsonSchema }> }>;
}

export interface OpenApiDocument {
  paths: Record<string, Record<string, RawOperation>>;
}

const METHODS: readonly HttpMethod[] = ['GET', 'POST', 'PUT', 'DELETE'];

/** Every operation of the document, in document order. */
export function operationsOf(document: OpenApiDocument): Operation[] {
  const doc = dereferenced(document);
  const out: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [lower, raw] of Object.entries(item)) {
      const method = lower.toUpperCase() as HttpMethod;
      if (!METHODS.includes(method)) continue;
      const responses: Record<string, DocumentedResponse> = {};
      for (const [status, response] of Object.entries(raw.responses ?? {})) {
        const [mediaType, media] = Object.entries(response.content ?? {})[0] ?? [];
        responses[status] = { schema: mediaType === 'application/json' ? media?.schema : undefined, mediaType };
      }
      const errors = Object.entries(responses).filter(([status]) => Number(status) >= 400);
      out.push({
        key: `${method} ${path}`,
        method,
        path,
        params: (raw.parameters ?? []).map((p) => ({ name: p.name, in: p.in as Parameter['in'], required: p.required === true, schema: p.schema })),
        body: raw.requestBody?.content?.['application/json']?.schema,
        operatorKey: (raw.security ?? []).some((alternative) => 'operatorKey' in alternative),
        agentToken: (raw.security ?? []).some((alternative) => 'agentToken' in alternative),
        responses,
        toolCall: errors.length > 0 && errors.every(([, r]) => declaredProperties(r.schema).toolResult !== undefined),
        streams: Object.values(responses).some((r) => r.mediaType === 'text/event-stream'),
      });
    }
  }
  return out;
}

/**
 * The operation a request reaches, judged the way the router judges it: the URL normalized
 * as a client and light-my-request normalize it (dot segments collapse), static segments
 * compared decoded, a parameter matching one whole segment, even an empty one. Undefined when
 * no documented operation takes the request.
 */
export function routeOf(operations: readonly Operation[], method: string, url: string): Operation | undefined {
  const segments = new URL(url, 'http://fuzz.invalid').pathname.split('/');
  const candidates = operations.filter((op) => {
    if (op.method !== method) return false;
    const template = op.path.split('/');
    return template.length === segments.length && template.every((part, i) => part.startsWith('{') || part === decoded(segments[i] ?? ''));
  });
  // Static segments win over parameters, as in the router.
  return candidates.sort((a, b) => staticCount(b) - staticCount(a))[0];
}

function staticCount(op: Operation): number {
  return op.path.split('/').filter((part) => !part.startsWith('{')).length;
}

function decoded(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    // Not valid percent-encoding: the router compares such a segment as it came.
    return segment;
  }
}

/**
 * What the app may answer a URL no documented operation takes (the document cannot list it):
 * 404 ROUTE_NOT_FOUND, or what is judged before routing is: the operator key (401, deny by
 * default) and the body (400, 413, 415: the not-found handler still parses a body).
 */
export const UNROUTED: Readonly<Record<number, string>> = {
  400: 'VALIDATION',
  401: 'UNAUTHENTICATED',
  404: 'ROUTE_NOT_FOUND',
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
};

export interface Answer {
  status: number;
  contentType: string | undefined;
  /** The body text; undefined for an event stream that was opened (its body never ends). */
  body: string | undefined;
}

const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
const compiled = new WeakMap<JsonSchema, ValidateFunction>();

function validatorFor(schema: JsonSchema): ValidateFunction {
  let validate = compiled.get(schema);
  if (validate === undefined) {
    validate = ajv.compile(schema);
    compiled.set(schema, validate);
  }
  return validate;
}

/**
 * The broken promises of one answer, as sentences (empty when it keeps them all): no 5xx; a
 * status the operation documents; a JSON body that matches the documented schema of that
 * status, which for errors means exactly `{statusCode, code, error, message}` (+ `toolResult`
 * on tool-call routes) with a code the document lists there; `statusCode` equal to the status;
 * the reason phrase in `error`; `toolResult` carrying the message a model is shown; and no
 * credential echoed in an error.
 */
export function brokenPromises(op: Operation | undefined, answer: Answer, secrets: readonly string[]): string[] {
  const broken: string[] = [];
  const { status } = answer;
  if (status >= 500) broken.push(`answered ${status}`);
  if (answer.body !== undefined && status >= 400) {
    for (const secret of secrets) if (secret.length > 0 && answer.body.includes(secret)) broken.push('the body echoes a credential');
  }
  const documented = op === undefined ? undefined : op.responses[String(status)];
  if (op === undefined) {
    if (UNROUTED[status] === undefined) broken.push(`no documented route takes the request, yet it answered ${status}`);
  } else if (documented === undefined) {
    broken.push(`status ${status} is not documented for ${op.key} (documented: ${Object.keys(op.responses).join(', ')})`);
  }
  if (status === 204 || answer.body === undefined) return broken;
  const expectsJson = status >= 400 || documented?.mediaType === 'application/json';
  if (!expectsJson) return broken;
  if (!/^application\/json/.test(answer.contentType ?? '')) broken.push(`content-type ${String(answer.contentType)} is not JSON`);
  let body: unknown;
  try {
    body = JSON.parse(answer.body);
  } catch {
    broken.push(`the body is not JSON: ${answer.body.slice(0, 120)}`);
    return broken;
  }
  if (documented?.schema !== undefined) {
    const validate = validatorFor(documented.schema);
    if (!validate(body)) broken.push(`the body does not match the documented ${status} schema: ${ajv.errorsText(validate.errors)}`);
  }
  if (status >= 400) broken.push(...errorShapeProblems(op, status, body));
  return broken;
}

function errorShapeProblems(op: Operation | undefined, status: number, body: unknown): string[] {
  const problems: string[] = [];
  const error = (body ?? {}) as Record<string, unknown>;
  const keys = Object.keys(error).sort();
  const expected = op?.toolCall === true ? ['code', 'error', 'message', 'statusCode', 'toolResult'] : ['code', 'error', 'message', 'statusCode'];
  if (keys.join() !== expected.join()) problems.push(`error keys are [${keys.join(', ')}], expected [${expected.join(', ')}]`);
  if (error.statusCode !== status) problems.push(`statusCode ${String(error.statusCode)} differs from the HTTP status ${status}`);
  if (error.error !== STATUS_CODES[status]) problems.push(`error "${String(error.error)}" is not the reason phrase "${String(STATUS_CODES[status])}"`);
  if (typeof error.message !== 'string' || error.message.length === 0) problems.push('message is empty or not a string');
  if (op === undefined && error.code !== UNROUTED[status]) problems.push(`code ${String(error.code)} for an unrouted request`);
  if (op?.toolCall === true) {
    const toolResult = error.toolResult as { isError?: unknown; content?: unknown } | undefined;
    if (toolResult?.isError !== true || toolResult.content !== `Error: ${String(error.message)}`) {
      problems.push(`toolResult ${JSON.stringify(toolResult)} is not {isError: true, content: "Error: <message>"}`);
    }
  }
  return problems;
}
