/**
 * Hostile requests for one documented operation, generated from its OpenAPI description:
 * schema-valid bodies (test/fuzz/hostile-values.ts) with mutations, whole-body attacks
 * (malformed JSON, non-object JSON, deep nesting, wrong or missing content types, a body just
 * over the limit), bad path ids and query strings, and real, wrong or garbage credentials; and
 * how a case becomes `app.inject()` options once its refs are resolved.
 */
import fc from 'fast-check';
import type { InjectOptions } from 'fastify';
import type { Operation, Parameter } from './contract.js';
import {
  deepValue,
  headerText,
  hostileValue,
  mutate,
  mutation,
  Ref,
  refsFor,
  schemaValue,
  unknownKey,
  urlString,
  validValue,
  withOwn,
  type Part,
  type RefName,
  type Vocabulary,
} from './hostile-values.js';

/** A header value assembled from text and refs; null leaves the header out. */
export type HeaderValue = Part[] | null;
export type Segment = { kind: 'value'; value: Part } | { kind: 'raw'; text: string };
export type QuerySpec = { kind: 'pairs'; pairs: [string, Part][] } | { kind: 'raw'; text: string };
export type BodySpec =
  | { kind: 'none' }
  | { kind: 'json'; value: unknown; contentType: string | null }
  | { kind: 'text'; text: string; contentType: string | null }
  | { kind: 'over-limit'; contentType: string };

export interface FuzzCase {
  op: Operation;
  path: Record<string, Segment>;
  query: QuerySpec;
  headers: Record<string, HeaderValue>;
  body: BodySpec;
  [fc.toStringMethod]?: () => string;
}

// ---------------------------------------------------------------------------- requests

const JSON_TYPES = ['application/json', 'application/json; charset=utf-8', 'Application/JSON', 'application/json;charset=UTF-8'];
const OTHER_TYPES = [
  'text/plain', 'application/x-www-form-urlencoded', 'application/xml', 'multipart/form-data; boundary=x', 'application/octet-stream',
  'application/jsonx', 'json', '*/*', 'text/plain; charset=utf-8', 'application/json; charset=latin1', ';;', 'application/',
];
const MALFORMED_JSON = [
  '{bad', '{"a":1,}', "{'a':1}", 'NaN', '\u0000', '\uFEFF{}', '[', '"unterminated', '{"a":1}{"b":2}', '{"a":\u0000}', '{"a":01}', '{"a":"\\u12"}',
  '{"__proto__":{"polluted":true}}', '{"constructor":{"prototype":{"polluted":true}}}', 'undefined', '{"a":1e999999}', '\uD800', '//{}',
];
const RAW_SEGMENTS = ['', '%E0%A4%A', '%00', '%zz', '%', '%%', '%u0041', '%C0%AF', '%ED%A0%80', '..', '.', '../', '%2e%2e%2f', '%2F', 'a'.repeat(300), 'a%20b', '%0d%0a'];
const RAW_QUERIES = ['%E0%A4%A=1', 'a=%zz', '&&&', '=', 'limit', 'limit=1&limit=2', 'after[]=1', 'status[0]=idle', '__proto__[x]=1', 'constructor[prototype][x]=1', 'cascade=maybe', 'after=-1', 'limit=1e400'];

function bodyFor(op: Operation, vocabulary: Vocabulary): fc.Arbitrary<BodySpec> {
  const schema = op.body ?? {};
  const valid = validValue(schema, 'body', vocabulary);
  const mutated = fc.tuple(valid, fc.array(mutation, { maxLength: 3 })).map(([value, ms]) => mutate(value, ms));
  const json = fc.constantFrom(...JSON_TYPES);
  const attacks: fc.WeightedArbitrary<BodySpec>[] = [
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('json' as const), value: valid, contentType: fc.constantFrom(...OTHER_TYPES) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('text' as const), text: fc.constantFrom(...MALFORMED_JSON), contentType: json }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('json' as const), value: fc.oneof(hostileValue, deepValue), contentType: json }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('over-limit' as const), contentType: fc.constantFrom('application/json', 'text/plain') }) },
    { weight: 1, arbitrary: valid.map((value): BodySpec => ({ kind: 'text', text: JSON.stringify(value, replaceRefsWithPlaceholders) ?? '', contentType: null })) },
  ];
  if (op.body === undefined) {
    return fc.oneof({ weight: 12, arbitrary: fc.constant<BodySpec>({ kind: 'none' }) }, ...attacks);
  }
  return fc.oneof(
    { weight: 8, arbitrary: fc.record({ kind: fc.constant('json' as const), value: valid, contentType: json }) },
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('json' as const), value: mutated, contentType: json }) },
    { weight: 1, arbitrary: fc.constant<BodySpec>({ kind: 'none' }) },
    ...attacks,
  );
}

/** Refs inside a body sent as raw text (no content type) are spelled as their ref names. */
function replaceRefsWithPlaceholders(_key: string, value: unknown): unknown {
  return value instanceof Ref ? `<${value.name}>` : value;
}

function segmentFor(param: Parameter, vocabulary: Vocabulary): fc.Arbitrary<Segment> {
  const options: fc.WeightedArbitrary<Segment>[] = [
    { weight: 2, arbitrary: schemaValue(param.schema, vocabulary).map((v): Segment => ({ kind: 'value', value: String(v) })) },
    { weight: 2, arbitrary: urlString.map((v): Segment => ({ kind: 'value', value: v })) },
    { weight: 1, arbitrary: fc.constantFrom(...RAW_SEGMENTS).map((text): Segment => ({ kind: 'raw', text })) },
  ];
  const real = refsFor(`path:${param.name}`, vocabulary);
  if (real !== undefined) options.push({ weight: 7, arbitrary: real.map((value): Segment => ({ kind: 'value', value })) });
  return fc.oneof(...options);
}

function queryFor(params: readonly Parameter[], vocabulary: Vocabulary): fc.Arbitrary<QuerySpec> {
  const wrong = fc.constantFrom('abc', '-1', '1.5', '1e400', '', 'true', '0x10', ' 1', '１', 'null', '9'.repeat(40));
  const one = (p: Parameter): fc.Arbitrary<[string, Part][]> =>
    fc.option(
      fc.oneof(
        { weight: 5, arbitrary: validValue(p.schema, `query:${p.name}`, vocabulary).map((v) => (v instanceof Ref ? v : String(v))) },
        { weight: 1, arbitrary: wrong },
        { weight: 1, arbitrary: urlString },
      ),
      { nil: undefined, freq: 2 },
    ).map((v): [string, Part][] => (v === undefined ? [] : [[p.name, v]]));
  const pairs = fc
    .tuple(fc.tuple(...params.map(one)), fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.tuple(unknownKey, urlString as fc.Arbitrary<Part>) }))
    .map(([known, extra]): QuerySpec => ({ kind: 'pairs', pairs: [...known.flat(), ...(extra === undefined ? [] : [extra])] }));
  return fc.oneof({ weight: 8, arbitrary: pairs }, { weight: 1, arbitrary: fc.constantFrom(...RAW_QUERIES).map((text): QuerySpec => ({ kind: 'raw', text })) });
}

const KEY = new Ref('operator.key');

const authorization: fc.Arbitrary<HeaderValue> = fc.oneof(
  { weight: 20, arbitrary: fc.constant<HeaderValue>(['Bearer ', KEY]) },
  { weight: 2, arbitrary: fc.constantFrom<HeaderValue>(['bearer ', KEY], ['Bearer   ', KEY, '  '], ['Basic ', KEY], [KEY], ['Bearer ', KEY, ' ', KEY], ['Bearer ', KEY, 'x'], ['Bearer'], ['Bearer ', new Ref('root.token')]) },
  { weight: 1, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: headerText.map((t): HeaderValue => [t]) },
);

const agentToken: fc.Arbitrary<HeaderValue> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom<HeaderValue>([new Ref('root.token')], [new Ref('child.token')]) },
  { weight: 1, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: fc.constantFrom<HeaderValue>([new Ref('root.token'), 'x'], ['x', new Ref('child.token')], [new Ref('root.token'), ' ', new Ref('child.token')], [new Ref('operator.key')]) },
  { weight: 1, arbitrary: headerText.map((t): HeaderValue => [t]) },
);

function headerParam(p: Parameter, vocabulary: Vocabulary): fc.Arbitrary<HeaderValue> {
  // A small pool of valid values, so that repeats (idempotent replays and conflicts) happen.
  const valid = fc.constantFrom('fz-key-1', 'fz-key-2', '7', '12');
  const matching = p.schema.pattern === undefined ? valid : valid.filter((v) => new RegExp(p.schema.pattern ?? '').test(v));
  return fc.oneof(
    { weight: 2, arbitrary: fc.constant(null) },
    { weight: 2, arbitrary: fc.oneof(matching, validValue(p.schema, `header:${p.name}`, vocabulary).map(String)).map((v): HeaderValue => [v]) },
    { weight: 1, arbitrary: headerText.map((t): HeaderValue => [t]) },
  );
}

/**
 * A body that asks for a real long-poll (a mutation can put any number in `waitMs`): it would
 * only make the fuzzer wait up to a minute, so it is never sent. Valid bodies use `waitMs: 0`.
 */
function longPoll(body: BodySpec, maxWait: number): boolean {
  if (body.kind !== 'json' || body.value === null || typeof body.value !== 'object') return false;
  const wait = (body.value as Record<string, unknown>).waitMs;
  return typeof wait === 'number' && Number.isInteger(wait) && wait > 0 && wait <= maxWait;
}

/** Agents a request can act as or on, with the refs of their id and token. */
const PERSONAS = [
  { id: new Ref('root.id'), token: new Ref('root.token') },
  { id: new Ref('child.id'), token: new Ref('child.token') },
];

/**
 * Every hostile request this operation can get. Half of them are coherent: the path names a
 * real agent, the token is that agent's own and the operator key is right, so that what is
 * left to reject is the body, the query or the domain's own rules.
 */
export function requestsFor(op: Operation, vocabulary: Vocabulary): fc.Arbitrary<FuzzCase> {
  const pathParams = op.params.filter((p) => p.in === 'path');
  const headerParams = op.params.filter((p) => p.in === 'header');
  const path = fc.record(Object.fromEntries(pathParams.map((p) => [p.name, segmentFor(p, vocabulary)])) as Record<string, fc.Arbitrary<Segment>>);
  const headers = fc.record(
    {
      authorization,
      'x-agent-token': op.agentToken ? agentToken : fc.oneof({ weight: 3, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: agentToken }),
      ...Object.fromEntries(headerParams.map((p) => [p.name, headerParam(p, vocabulary)])),
    },
    { requiredKeys: [] },
  ) as fc.Arbitrary<Record<string, HeaderValue>>;
  const persona = fc.option(fc.constantFrom(...PERSONAS), { nil: undefined, freq: 2 });
  const maxWait = op.body?.properties?.waitMs?.maximum ?? 0;
  return fc
    .record({ persona, path, query: queryFor(op.params.filter((p) => p.in === 'query'), vocabulary), headers, body: bodyFor(op, vocabulary).filter((body) => !longPoll(body, maxWait)) })
    .map(({ persona: as, ...parts }): FuzzCase => {
      if (as !== undefined) {
        if (parts.path.id !== undefined) parts.path = { ...parts.path, id: { kind: 'value', value: as.id } };
        parts.headers = { ...parts.headers, authorization: ['Bearer ', KEY], 'x-agent-token': [as.token] };
      }
      return { op, ...parts, [fc.toStringMethod]: () => `${op.key} ${printable(parts)}` };
    });
}

/** JSON with refs as `<name>` and long strings cut, so a counterexample stays readable. */
export function printable(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v instanceof Ref) return `<${v.name}>`;
    if (typeof v === 'string' && v.length > 120) return `${v.slice(0, 60)}…(${v.length} chars)`;
    return v;
  });
}

// ---------------------------------------------------------------------------- sending

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** encodeURIComponent, except that a lone surrogate becomes its (invalid) three UTF-8 bytes instead of throwing. */
export function percentEncode(text: string): string {
  let out = '';
  let last = 0;
  for (const match of text.matchAll(LONE_SURROGATE)) {
    const unit = match[0].charCodeAt(0);
    out += encodeURIComponent(text.slice(last, match.index));
    out += [0xe0 | (unit >> 12), 0x80 | ((unit >> 6) & 63), 0x80 | (unit & 63)].map((b) => `%${b.toString(16).toUpperCase()}`).join('');
    last = match.index + 1;
  }
  return out + encodeURIComponent(text.slice(last));
}

export type Resolve = (name: RefName) => string;

function resolveValue(value: unknown, resolve: Resolve): unknown {
  if (value instanceof Ref) return resolve(value.name);
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => resolveValue(v, resolve));
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value)) withOwn(out, key, resolveValue(child, resolve));
  return out;
}

const part = (p: Part, resolve: Resolve): string => (p instanceof Ref ? resolve(p.name) : p);

/** The inject options of a case, with every ref resolved against the forest as it is now. */
export function toInject(c: FuzzCase, resolve: Resolve, bodyLimit: number): InjectOptions & { method: string; url: string } {
  const path = c.op.path.replace(/\{(\w+)\}/g, (_, name: string) => {
    const segment = c.path[name];
    if (segment === undefined) return '';
    return segment.kind === 'raw' ? segment.text : percentEncode(part(segment.value, resolve));
  });
  const query = c.query.kind === 'raw' ? c.query.text : c.query.pairs.map(([k, v]) => `${percentEncode(k)}=${percentEncode(part(v, resolve))}`).join('&');
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(c.headers)) if (value !== null) headers[name] = value.map((p) => part(p, resolve)).join('');
  let payload: string | undefined;
  let contentType: string | null = null;
  switch (c.body.kind) {
    case 'none':
      break;
    case 'json':
      payload = JSON.stringify(resolveValue(c.body.value, resolve)) ?? 'null';
      contentType = c.body.contentType;
      break;
    case 'text':
      payload = c.body.text;
      contentType = c.body.contentType;
      break;
    case 'over-limit': {
      const frame = JSON.stringify({ pad: '' });
      payload = JSON.stringify({ pad: 'x'.repeat(bodyLimit + 1 - Buffer.byteLength(frame)) });
      contentType = c.body.contentType;
      break;
    }
  }
  if (contentType !== null) headers['content-type'] = contentType;
  return { method: c.op.method, url: query === '' ? path : `${path}?${query}`, headers, ...(payload === undefined ? {} : { payload }) };
}

/** A short, printable account of a request (long strings cut), for failure messages. */
export function describeRequest(request: { method: string; url: string; headers?: unknown; payload?: unknown }): string {
  const cut = (s: string): string => (s.length > 160 ? `${s.slice(0, 160)}…(${s.length} chars)` : s);
  const headers = Object.entries((request.headers ?? {}) as Record<string, string>).map(([k, v]) => `${k}: ${cut(JSON.stringify(v))}`);
  const body = typeof request.payload === 'string' ? cut(JSON.stringify(request.payload)) : '(none)';
  return `${request.method} ${cut(request.url)}\n  headers ${headers.join('; ')}\n  body ${body}`;
}
