/**
 * Why a request body is refused, in words a client can act on: a body sent with a content
 * coding (the service reads bodies uncompressed only), a compressed body sent without saying
 * so, a well-formed body with a key that could pollute prototypes, and text that is not
 * well-formed Unicode. Each check returns the message of the 400 or 415 (undefined: nothing
 * wrong), naming the place in the body as the schema errors do (`body/metadata/note`).
 *
 * Lone surrogates (domain/unicode.ts): any string of a body, key or value, holding one is
 * refused, so no text field needs a rule of its own. JSON text can carry one only as a
 * `\uD800`-`\uDFFF` escape (a body is decoded from UTF-8, which cannot encode one), so a body
 * without such an escape is not walked.
 */
import { LONE_SURROGATE_REASON, loneSurrogateIn, pointerSegment } from '../domain/unicode.js';

/** The message refusing a content coding other than `identity`; undefined when there is none. */
export function unsupportedEncoding(header: string | undefined): string | undefined {
  const coding = header?.trim() ?? '';
  if (coding === '' || coding.toLowerCase() === 'identity') return undefined;
  return `content-encoding ${coding} is not supported; send the body uncompressed`;
}

/**
 * Why a body the JSON parser refused was refused, when it is not plain malformed JSON: a body
 * that starts with the gzip magic bytes (0x1f 0x8b; 0x8b is no UTF-8 on its own, so the
 * decoded text starts with U+001F U+FFFD), or well-formed JSON holding a `__proto__` key or a
 * `constructor` key with a `prototype` key inside. Undefined: the body is not valid JSON.
 */
export function refusedBodyReason(text: string): string | undefined {
  if (text.startsWith('\u001f\ufffd')) {
    return 'body looks gzip-compressed (it starts with the bytes 0x1f 0x8b); compressed bodies are not supported: send the JSON uncompressed';
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  return forbiddenKey(parsed);
}

/** Where a parsed body holds a key that the parser refuses, as a message; undefined when none. */
function forbiddenKey(body: unknown): string | undefined {
  for (const [path, object] of objectsOf(body)) {
    if (Object.prototype.hasOwnProperty.call(object, '__proto__')) return `${path} contains a "__proto__" key, which is refused`;
    const ctor = Object.prototype.hasOwnProperty.call(object, 'constructor') ? object.constructor : undefined;
    if (ctor !== null && typeof ctor === 'object' && Object.prototype.hasOwnProperty.call(ctor, 'prototype')) {
      return `${path} contains a "constructor" key with a "prototype" key inside, which is refused`;
    }
  }
  return undefined;
}

/** Text that may hold a `\uD800`-`\uDFFF` escape; a quick test before walking the parsed body. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

/** Where the parsed body of `text` holds a string with a lone surrogate, as a message; undefined when none. */
export function loneSurrogate(text: string, body: unknown): string | undefined {
  if (!SURROGATE_ESCAPE.test(text)) return undefined;
  const found = loneSurrogateIn(body);
  if (found === undefined) return undefined;
  return found.key ? `body${found.path} has a key holding ${LONE_SURROGATE_REASON}` : `body${found.path} holds ${LONE_SURROGATE_REASON}`;
}

/** Every object and array of a parsed body with its path (`body`, `body/toolCalls/0`), without recursion. */
function* objectsOf(body: unknown): Generator<[string, Record<string, unknown>]> {
  const stack: [string, unknown][] = [['body', body]];
  while (stack.length > 0) {
    const [path, node] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    const object = node as Record<string, unknown>;
    yield [path, object];
    for (const [key, child] of Object.entries(object)) {
      if (child !== null && typeof child === 'object') stack.push([`${path}/${pointerSegment(key)}`, child]);
    }
  }
}
