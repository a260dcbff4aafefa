/**
 * Service-owned tools: the tools the service executes itself, with authority, when a model
 * calls them (from a step's output or `POST /v1/agents/{id}/tool-calls`). Each tool states
 * which agents have it in scope; the same predicate decides what is listed and what may run,
 * so a schema is never shown to an agent that cannot execute it.
 */
import { ServiceError } from '../domain/errors.js';
import type { ToolSchema } from '../domain/step-render.js';
import type { LiveAgent } from './live-agent.js';

export interface ToolExecution {
  agent: LiveAgent;
  toolCallId: string;
  signal?: AbortSignal;
}

export interface ToolOutcome {
  /** The canonical value. */
  output: unknown;
  /** The rendered text the model reads as the tool result. */
  content: string;
}

export interface ServiceTool extends ToolSchema {
  inScope(agent: LiveAgent): boolean;
  execute(input: unknown, exec: ToolExecution): Promise<ToolOutcome> | ToolOutcome;
}

export class ToolRegistry {
  private readonly tools = new Map<string, ServiceTool>();

  /** Register a tool; returns its disposer (idempotent). */
  register(tool: ServiceTool): () => void {
    if (this.tools.has(tool.name)) throw new Error(`tool "${tool.name}" is already registered`);
    this.tools.set(tool.name, tool);
    return () => {
      if (this.tools.get(tool.name) === tool) this.tools.delete(tool.name);
    };
  }

  listFor(agent: LiveAgent): ToolSchema[] {
    return [...this.tools.values()]
      .filter((tool) => tool.inScope(agent))
      .map(({ name, description, inputSchema }) => ({ name, description, inputSchema }));
  }

  /** The tool this agent may run under that name, or undefined. */
  find(agent: LiveAgent, name: string): ServiceTool | undefined {
    const tool = this.tools.get(name);
    return tool !== undefined && tool.inScope(agent) ? tool : undefined;
  }

  require(agent: LiveAgent, name: string): ServiceTool {
    const tool = this.find(agent, name);
    if (tool === undefined) throw new ServiceError('TOOL_NOT_FOUND', `unknown tool "${name}"`);
    return tool;
  }
}
