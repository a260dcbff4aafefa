/**
 * Hostile values, generated from JSON schemas: schema-valid values (with the fixture forest's
 * real ids where a field names one, so that domain logic runs), and what breaks them: wrong
 * types, missing required fields, unknown and `__proto__`/`constructor`/`prototype` keys, huge
 * strings (up to ~200 KB) and unicode edge cases (lone surrogates, NUL, RTL override, emoji,
 * combining marks), and nesting deeper than 100 levels.
 *
 * Real values appear as `Ref`s: a case is generated once, and its refs are resolved against the
 * forest as it is when the case runs.
 */
import fc from 'fast-check';
import type { JsonSchema } from './contract.js';

export const REF_NAMES = [
  'operator.key',
  'root.id',
  'root.token',
  'root.stepId',
  'root.messageId',
  'child.id',
  'child.token',
  'child.stepId',
  'child.callId',
  'child.messageId',
  'retired.id',
] as const;
export type RefName = (typeof REF_NAMES)[number];

/** A real value of the fixture forest, looked up when the request is sent. */
export class Ref {
  constructor(readonly name: RefName) {}

  [fc.toStringMethod](): string {
    return `<${this.name}>`;
  }
}

/** Which real values a field of a given name may take (by `in:name`). */
const REAL_VALUES: Record<string, RefName[]> = {
  'path:id': ['root.id', 'child.id', 'retired.id'],
  'path:stepId': ['root.stepId', 'child.stepId'],
  'path:messageId': ['root.messageId', 'child.messageId'],
  'query:parentId': ['root.id', 'child.id'],
  'body:rootId': ['root.id', 'child.id'],
  'body:subagent_id': ['child.id', 'root.id'],
  'body:toolCallId': ['child.callId'],
};

export interface Vocabulary {
  /** The service-owned tools the fixture's agents see (from `GET /v1/agents/{id}/tools`). */
  tools: { name: string; inputSchema: JsonSchema }[];
  /** Real values for fields that are not ids: package names for `path:name`. */
  constants: Record<string, string[]>;
}

export type Part = string | Ref;

// ---------------------------------------------------------------------------- strings

const EDGE_STRINGS = [
  '\uD800', '\uDFFF', 'a\uD800b', '\uDC00\uD800', '\u0000', 'a\u0000b', '\u202Eevil\u202C', '😀', '👩‍👩‍👧‍👦', 'e\u0301\u0302\u0303',
  'Z\u0334\u0327\u031B\u034D\u0300a', '\uFEFF', '\u2028\u2029', '\r\n', '\t', ' ', '', '../../etc/passwd', '..', '.', '%00', '%E0%A4%A',
  '<script>alert(1)</script>', '${7*7}', "' OR 1=1 --", '\\', '"', 'null', 'undefined', '__proto__', 'constructor', 'prototype',
];

const hugeString = fc
  .record({ unit: fc.constantFrom('a', 'é', '😀', '\u0000', '\uD800', 'e\u0301', '\u202E'), length: fc.integer({ min: 1_000, max: 200_000 }) })
  .map(({ unit, length }) => unit.repeat(Math.max(1, Math.floor(length / unit.length))));

/** Strings for URL parts: a real server refuses a request line over 16 KiB before routing, so no huge ones. */
export const urlString: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...EDGE_STRINGS) },
  { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }) },
  { weight: 1, arbitrary: fc.record({ unit: fc.constantFrom('a', '😀', '\u0000', 'é'), length: fc.integer({ min: 129, max: 2_000 }) }).map(({ unit, length }) => unit.repeat(length)) },
);

/** Strings for bodies: the URL ones, and huge ones up to ~200 KB. */
export const hostileString: fc.Arbitrary<string> = fc.oneof({ weight: 8, arbitrary: urlString }, { weight: 1, arbitrary: hugeString });

/** Printable latin1 (what an HTTP header can carry), sometimes long. */
export const headerText = fc.oneof(
  { weight: 4, arbitrary: fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).filter((c) => c < 0x7f || c >= 0xa0).map((c) => String.fromCharCode(c)), maxLength: 40 }) },
  { weight: 1, arbitrary: fc.constantFrom('', ' ', 'null', 'undefined', '\t', 'x'.repeat(8_000), 'Ã©', '%00') },
);

// ---------------------------------------------------------------------------- values

/** `{"a":{"a":...}}` or `[[...]]`, deeper than any sane body (the app refuses beyond 64). */
export const deepValue = fc.record({ depth: fc.integer({ min: 60, max: 400 }), array: fc.boolean() }).map(({ depth, array }) => {
  let value: unknown = array ? [] : {};
  for (let i = 0; i < depth; i++) value = array ? [value] : { a: value };
  return value;
});

/** An object with an own `__proto__` / `constructor.prototype` key, as JSON.parse would make it. */
const pollutingValue = fc.constantFrom('__proto__', 'constructor', 'prototype').map((key) =>
  withOwn({}, key, key === 'constructor' ? { prototype: { polluted: true } } : { polluted: true }),
);

export const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom<unknown>(null, true, false, 0, -1, 1.5, -0.0001, 1e308, -1e308, 2 ** 53 + 1, [], {}, [1], ['x']) },
  { weight: 4, arbitrary: hostileString },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  { weight: 1, arbitrary: deepValue },
  { weight: 1, arbitrary: pollutingValue },
);

export const unknownKey = fc.oneof(fc.constantFrom('__proto__', 'constructor', 'prototype', 'extra', 'toString', 'hasOwnProperty', ''), fc.string({ maxLength: 8 }));

export function withOwn(target: Record<string, unknown>, key: string, value: unknown): Record<string, unknown> {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  return target;
}

export function refsFor(where: string, vocabulary: Vocabulary): fc.Arbitrary<Part> | undefined {
  const refs = REAL_VALUES[where];
  if (refs !== undefined) return fc.constantFrom(...refs).map((name) => new Ref(name));
  const constants = vocabulary.constants[where];
  return constants === undefined ? undefined : fc.constantFrom(...constants);
}

/** A value the schema accepts (refs for fields that name real things). */
export function validValue(schema: JsonSchema, where: string, vocabulary: Vocabulary): fc.Arbitrary<unknown> {
  // A valid long-poll would only make the fuzzer wait; every other wait is a hostile value.
  if (where === 'body:waitMs') return fc.constant(0);
  const base = schemaValue(schema, vocabulary);
  const real = refsFor(where, vocabulary);
  return real === undefined ? base : fc.oneof({ weight: 3, arbitrary: real }, { weight: 1, arbitrary: base });
}

export function schemaValue(schema: JsonSchema, vocabulary: Vocabulary): fc.Arbitrary<unknown> {
  if (schema.anyOf !== undefined) return fc.oneof(...schema.anyOf.map((s) => schemaValue(s, vocabulary)));
  if (schema.enum !== undefined) return fc.constantFrom(...schema.enum);
  switch (schema.type) {
    case 'string':
      if (schema.pattern !== undefined) return fc.stringMatching(new RegExp(schema.pattern));
      return fc.string({ minLength: schema.minLength ?? 0, maxLength: Math.max(schema.minLength ?? 0, Math.min(schema.maxLength ?? 24, 24)) });
    case 'integer':
      return fc.integer({ min: schema.minimum ?? -1_000, max: upperBound(schema) });
    case 'number':
      return fc.double({ min: schema.minimum ?? -1_000, max: upperBound(schema), noNaN: true });
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array':
      return fc.array(schemaValue(schema.items ?? {}, vocabulary), { minLength: schema.minItems ?? 0, maxLength: Math.max(schema.minItems ?? 0, Math.min(schema.maxItems ?? 3, 3)) });
    case 'object':
      return objectValue(schema, vocabulary);
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
}

/**
 * The largest valid number to generate. A `maximum` of Number.MAX_SAFE_INTEGER only keeps JSON
 * from rounding, so such a field gets small values as if it had none.
 */
function upperBound(schema: JsonSchema): number {
  return schema.maximum === undefined || schema.maximum >= Number.MAX_SAFE_INTEGER ? 1_000 : schema.maximum;
}

function objectValue(schema: JsonSchema, vocabulary: Vocabulary): fc.Arbitrary<unknown> {
  const properties = schema.properties ?? {};
  const names = Object.keys(properties);
  if (names.length === 0) {
    if (schema.additionalProperties === false) return fc.constant({});
    return fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 });
  }
  const model = Object.fromEntries(names.map((name) => [name, validValue(properties[name] ?? {}, `body:${name}`, vocabulary)]));
  const generic = fc.record(model, { requiredKeys: schema.required ?? [] });
  // A tool call (`name` + free-form `input`): most of the time a real tool with input from its own schema.
  const input = properties.input;
  if (properties.name === undefined || input === undefined || input.type !== undefined || vocabulary.tools.length === 0) return generic;
  const toolCall = fc.constantFrom(...vocabulary.tools).chain((tool) =>
    objectValue({ ...schema, properties: { ...properties, name: { enum: [tool.name] }, input: tool.inputSchema } }, { ...vocabulary, tools: [] }),
  );
  return fc.oneof({ weight: 3, arbitrary: toolCall }, { weight: 1, arbitrary: generic });
}

// ---------------------------------------------------------------------------- mutations

export interface Mutation {
  kind: 'delete' | 'replace' | 'add';
  pick: number;
  key: string;
  value: unknown;
}

export const mutation: fc.Arbitrary<Mutation> = fc.record({
  kind: fc.constantFrom<Mutation['kind']>('delete', 'replace', 'replace', 'add'),
  pick: fc.nat(),
  key: unknownKey,
  value: hostileValue,
});

export function clone(value: unknown): unknown {
  if (value instanceof Ref || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(clone);
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value)) withOwn(out, key, clone(child));
  return out;
}

/** The containers of a value and their slots, depth-first (refs are leaves). */
function slots(value: unknown): { container: Record<string, unknown> | unknown[]; key: string | number }[] {
  const out: { container: Record<string, unknown> | unknown[]; key: string | number }[] = [];
  const visit = (node: unknown): void => {
    if (node instanceof Ref || node === null || typeof node !== 'object') return;
    const container = node as Record<string, unknown> | unknown[];
    for (const key of Array.isArray(container) ? container.keys() : Object.keys(container)) {
      out.push({ container, key });
      visit((container as Record<string | number, unknown>)[key]);
    }
  };
  visit(value);
  return out;
}

function containers(value: unknown): (Record<string, unknown> | unknown[])[] {
  const out = slots(value).map((s) => (s.container as Record<string | number, unknown>)[s.key]).filter((v): v is Record<string, unknown> => v !== null && typeof v === 'object' && !(v instanceof Ref));
  return value !== null && typeof value === 'object' ? [value as Record<string, unknown>, ...out] : out;
}

export function mutate(value: unknown, mutations: readonly Mutation[]): unknown {
  const out = clone(value);
  for (const m of mutations) {
    if (m.kind === 'add') {
      const targets = containers(out);
      const target = targets[m.pick % Math.max(1, targets.length)];
      if (Array.isArray(target)) target.push(clone(m.value));
      else if (target !== undefined) withOwn(target, m.key, clone(m.value));
      continue;
    }
    const all = slots(out);
    const slot = all[m.pick % Math.max(1, all.length)];
    if (slot === undefined) continue;
    if (Array.isArray(slot.container)) {
      if (m.kind === 'delete') slot.container.splice(slot.key as number, 1);
      else slot.container[slot.key as number] = clone(m.value);
    } else if (m.kind === 'delete') {
      delete slot.container[slot.key as string];
    } else {
      withOwn(slot.container, slot.key as string, clone(m.value));
    }
  }
  return out;
}
