/**
 * The model's answer as a chat-completions assistant message, read into the step protocol's
 * own form, so that recording an output knows one form; and how a tool call's JSON arguments
 * are read, the same for a posted message and for the built-in driver's endpoint.
 *
 * Invariants: the message's text, or else its refusal, is the content (an empty text is none);
 * each tool call keeps its id and name; arguments that are not JSON do not stop the output:
 * the call is kept with its text as input and refused (the step records an error result for
 * it and runs nothing); arguments whose JSON holds a lone surrogate refuse the whole output,
 * as such text anywhere else in a body does.
 */
import type { ChatAssistantOutput, ModelOutput, PostedOutput } from '../contract/index.js';
import { ServiceError } from '../domain/errors.js';
import type { ToolCall } from '../domain/message.js';
import { LONE_SURROGATE_REASON, loneSurrogateIn } from '../domain/unicode.js';

/** An output in the service's form, and why each call whose arguments could not be read is refused, by call id. */
export interface ReadOutput {
  output: ModelOutput;
  refused: Map<string, string>;
}

/** A posted output, in either form, as the service's form. */
export function readOutput(posted: PostedOutput): ReadOutput {
  return 'role' in posted ? fromChatMessage(posted) : { output: posted, refused: new Map() };
}

function fromChatMessage(message: ChatAssistantOutput): ReadOutput {
  const refused = new Map<string, string>();
  const toolCalls = (message.tool_calls ?? []).map((call, i): ToolCall => {
    const read = readArguments(call.id, call.function.name, call.function.arguments);
    if (read.refusal !== undefined) refused.set(call.id, read.refusal);
    // Text the body could not carry itself must not arrive inside it either.
    if (loneSurrogateIn(read.input) !== undefined) {
      throw new ServiceError('VALIDATION', `body/tool_calls/${i}/function/arguments holds ${LONE_SURROGATE_REASON}`);
    }
    return { id: call.id, name: call.function.name, input: read.input };
  });
  const output: ModelOutput = {};
  const text = textOrRefusal(message.content, message.refusal);
  if (text !== undefined) output.content = text;
  if (toolCalls.length > 0) output.toolCalls = toolCalls;
  if (message.usage !== undefined) output.usage = message.usage;
  if (message.model !== undefined) output.model = message.model;
  return { output, refused };
}

/**
 * A tool call's arguments, the JSON text a model wrote: blank text is `{}`. Text that is not
 * JSON is kept as the input, with the refusal the call's error result carries.
 */
export function readArguments(id: string, name: string, text: string): { input: unknown; refusal?: string } {
  try {
    return { input: text.trim() === '' ? {} : (JSON.parse(text) as unknown) };
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    return { input: text, refusal: `the arguments of tool call "${id}" (${name}) are not valid JSON (${why}); the tool was not run` };
  }
}

/** An assistant message's text: its content, or else its refusal; undefined when neither has any. */
export function textOrRefusal(content: string | null | undefined, refusal: string | null | undefined): string | undefined {
  return nonEmpty(content) ?? nonEmpty(refusal);
}

function nonEmpty(text: string | null | undefined): string | undefined {
  return text === null || text === undefined || text === '' ? undefined : text;
}
