/**
 * Well-formed text. A string holding a UTF-16 surrogate without its pair (\uD800-\uDFFF alone)
 * is not Unicode: it cannot be written as UTF-8, so it cannot be stored or sent on unchanged.
 * The service refuses such text wherever a client sends it.
 */

/** A surrogate code unit without its pair (with the `u` flag, a pair is one code point). */
const LONE_SURROGATE = /\p{Cs}/u;

/** Why such text is refused, for the messages that name where it was. */
export const LONE_SURROGATE_REASON = 'a lone UTF-16 surrogate (\\uD800-\\uDFFF without its pair); text must be well-formed Unicode';

export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text);
}

/**
 * Where a JSON value holds a string, a value or a key, with a lone surrogate: the JSON Pointer
 * of the value (`/note/1`, `''` for the value itself) and whether it is a key of the object
 * there. Undefined when every string is well-formed. Walked without recursion.
 */
export function loneSurrogateIn(value: unknown): { path: string; key: boolean } | undefined {
  if (typeof value === 'string') return hasLoneSurrogate(value) ? { path: '', key: false } : undefined;
  const stack: [string, unknown][] = [['', value]];
  while (stack.length > 0) {
    const [path, node] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    for (const [key, child] of Object.entries(node as Record<string, unknown>)) {
      if (hasLoneSurrogate(key)) return { path, key: true };
      const at = `${path}/${pointerSegment(key)}`;
      if (typeof child === 'string' && hasLoneSurrogate(child)) return { path: at, key: false };
      if (child !== null && typeof child === 'object') stack.push([at, child]);
    }
  }
  return undefined;
}

/** A key as a JSON Pointer segment, as validation errors write paths. */
export function pointerSegment(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}
