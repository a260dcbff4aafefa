/**
 * One TypeBox schema per service-owned tool defines what the model sees (inputSchema), the
 * argument type the implementation gets, and the validation of what the model sent (strict:
 * no coercion, unknown properties rejected).
 */
import type { Static, TObject } from '@sinclair/typebox';
import { Ajv } from 'ajv';
import { ServiceError } from '../domain/errors.js';
import type { LiveAgent } from './live-agent.js';
import type { ServiceTool, ToolExecution, ToolOutcome } from './tool-registry.js';

const ajv = new Ajv({ coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: false, strict: false });

export interface ToolDefinition<T extends TObject> {
  name: string;
  description: string;
  input: T;
  inScope(agent: LiveAgent): boolean;
  execute(input: Static<T>, exec: ToolExecution): Promise<ToolOutcome> | ToolOutcome;
}

export function defineTool<T extends TObject>(definition: ToolDefinition<T>): ServiceTool {
  const validate = ajv.compile<Static<T>>(definition.input);
  return {
    name: definition.name,
    description: definition.description,
    inputSchema: JSON.parse(JSON.stringify(definition.input)) as Record<string, unknown>,
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
