/**
 * A tool of an MCP server as agents see it: `mcp__<server>__<tool>`, the server's input schema
 * as its parameters. Running it validates the input against that schema (an invalid input is
 * refused like any service-owned tool's, VALIDATION), records durably that the call started,
 * and calls the server under the server's bound on concurrent calls; what comes back becomes
 * the call's result: the text content joined, `structuredContent` as the output, `isError` as
 * an error result. An unreachable server or a timeout is an error result the model can read.
 */
import type { ValidateFunction } from 'ajv';
import { ServiceError } from '../../domain/errors.js';
import { mcpToolName } from '../../domain/tool-servers.js';
import type { ServiceTool, ToolOutcome } from '../tool-registry.js';
import type { McpCallOutcome, McpTool } from './mcp-connection.js';

/** What a server's tool needs of its server: a call, bounded and fenced by the server. */
export interface McpToolHost {
  /** The server's registered name. */
  readonly name: string;
  /** The tenant whose server it is (its tools are that tenant's agents' only); undefined: global. */
  readonly tenantId: string | undefined;
  call(tool: string, input: Record<string, unknown>, effectKey: string, signal: AbortSignal | undefined): Promise<McpCallOutcome>;
}

export function mcpServiceTool(host: McpToolHost, tool: McpTool, validate: ValidateFunction | undefined, afterRestart: 'rerun' | 'unknown'): ServiceTool {
  const name = mcpToolName(host.name, tool.name);
  return {
    name,
    description: tool.description,
    inputSchema: tool.inputSchema,
    owner: 'mcp',
    tenantId: host.tenantId,
    concurrent: true,
    afterRestart,
    inScope: () => true,
    async execute(input, exec): Promise<ToolOutcome> {
      const args = input === undefined || input === null ? {} : input;
      if (typeof args !== 'object' || Array.isArray(args)) throw new ServiceError('VALIDATION', `invalid input for tool "${name}": input must be an object`);
      if (validate !== undefined && !validate(args)) {
        const first = validate.errors?.[0];
        const where = first?.instancePath === undefined || first.instancePath === '' ? 'input' : `input${first.instancePath.replace(/\//g, '.')}`;
        throw new ServiceError('VALIDATION', `invalid input for tool "${name}": ${where} ${first?.message ?? 'is invalid'}`);
      }
      await exec.started();
      return outcomeOf(host.name, await host.call(tool.name, args as Record<string, unknown>, exec.effectKey, exec.signal));
    },
  };
}

function outcomeOf(server: string, outcome: McpCallOutcome): ToolOutcome {
  switch (outcome.kind) {
    case 'answered': {
      const content = outcome.text !== '' || outcome.structured === undefined ? outcome.text : JSON.stringify(outcome.structured);
      const result: ToolOutcome = { output: outcome.structured ?? outcome.text, content };
      if (outcome.isError) result.isError = true;
      return result;
    }
    case 'unreachable':
      return { output: null, content: `Error: the tool server "${server}" is unreachable: ${outcome.error}`, isError: true };
    case 'timeout':
      return { output: null, content: `Error: the tool server "${server}" gave no answer in time (${outcome.error})`, isError: true };
  }
}
