/**
 * One TypeBox schema per service-owned tool defines what the model sees (inputSchema), the
 * argument type the implementation gets, and the validation of what the model sent (strict:
 * no coercion, unknown properties rejected).
 *
 * A schema is compiled once, by `toolInput`, where it is defined at module level: Ajv keeps
 * every schema it compiled, and the code generated for it, for the life of the process, so a
 * schema built and compiled per call (per Activation, say) would grow the heap for good. Tools
 * themselves may be built as often as needed; building one compiles nothing.
 */
import type { Static, TObject } from '@sinclair/typebox';
import { Ajv, type ValidateFunction } from 'ajv';
import { ServiceError } from '../domain/errors.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { ServiceTool, ToolExecution, ToolOutcome } from './tool-registry.js';

const ajv = new Ajv({ coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: false, strict: false });

/** A tool's input schema with its validator and the JSON the model sees (see `toolInput`). */
export interface ToolInput<T extends TObject> {
  readonly schema: T;
  readonly validate: ValidateFunction<Static<T>>;
  readonly json: Record<string, unknown>;
}

/** Compile a tool's input schema: call it once per schema, at module level (see the header). */
export function toolInput<T extends TObject>(schema: T): ToolInput<T> {
  return { schema, validate: ajv.compile<Static<T>>(schema), json: JSON.parse(JSON.stringify(schema)) as Record<string, unknown> };
}

export interface ToolDefinition<T extends TObject> {
  name: string;
  description: string;
  input: ToolInput<T>;
  inScope(agent: LiveAgent): boolean;
  execute(input: Static<T>, exec: ToolExecution): Promise<ToolOutcome> | ToolOutcome;
}

export function defineTool<T extends TObject>(definition: ToolDefinition<T>): ServiceTool {
  const { validate } = definition.input;
  return {
    name: definition.name,
    description: definition.description,
    inputSchema: definition.input.json,
    inScope: definition.inScope,
    execute(input, exec) {
      if (!validate(input)) {
        const first = validate.errors?.[0];
        const where = first?.instancePath === undefined || first.instancePath === '' ? 'input' : `input${first.instancePath.replace(/\//g, '.')}`;
        throw new ServiceError('VALIDATION', `invalid input for tool "${definition.name}": ${where} ${first?.message ?? 'is invalid'}`);
      }
      return definition.execute(input, exec);
    },
  };
}
