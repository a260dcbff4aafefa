/**
 * Declared backend tools: tools the operator's backend executes, declared to the service so
 * that grants, the step's tool list, the tool worker pool and its audit apply to them. A
 * declaration is a name, a description and the JSON Schema of its parameters.
 */

/** What a declared tool's name may be: a model-facing function name (and never an MCP tool's, `mcp__…`). */
export const BACKEND_TOOL_NAME_PATTERN = '^[A-Za-z0-9_-]{1,64}$';

export interface BackendToolConfig {
  description: string;
  parameters: Record<string, unknown>;
  /** The tenant whose tool it is (declared with its key); absent: global, an admin's. */
  tenantId?: string;
}
