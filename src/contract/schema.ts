/**
 * How the wire contract is written: literal sets derive from the domain's `as const` tuples,
 * and a shared schema (one with an `$id`) is used through `ref`, so it is written once, added
 * to the app once (`addSchema`) and documented once, as an OpenAPI component.
 */
import { Type, type IntegerOptions, type NumberOptions, type Static, type TInteger, type TLiteral, type TNumber, type TSchema, type TUnion, type TUnsafe } from '@sinclair/typebox';

/** A TypeBox union of string literals from one of the domain's `as const` tuples. */
export function literals<const T extends readonly string[]>(values: T, options: Record<string, unknown> = {}): TUnion<TLiteral<T[number]>[]> {
  return Type.Union(values.map((v) => Type.Literal(v)) as TLiteral<T[number]>[], options);
}

/** A shared schema: its name is the `$id`, which names its OpenAPI component too. */
export function shared<T extends TSchema>(id: string, schema: T): T & { $id: string } {
  return { ...schema, $id: id };
}

/** A reference to a shared schema that keeps the schema's static type. */
export function ref<T extends TSchema & { $id: string }>(schema: T, options: { description?: string } = {}): TUnsafe<Static<T>> {
  return Type.Unsafe<Static<T>>({ $ref: schema.$id, ...options });
}

/**
 * A number a client sends as a limit, a position or a count. JSON numbers above
 * Number.MAX_SAFE_INTEGER lose digits when parsed, so such a value is refused (VALIDATION)
 * rather than silently rounded to a neighbour.
 */
export function exactInteger(options: IntegerOptions = {}): TInteger {
  return Type.Integer({ maximum: Number.MAX_SAFE_INTEGER, ...options });
}

/** As exactInteger, for an amount that may have a fraction (a cost). */
export function exactNumber(options: NumberOptions = {}): TNumber {
  return Type.Number({ maximum: Number.MAX_SAFE_INTEGER, ...options });
}
