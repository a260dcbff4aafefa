/**
 * Service-owned tools: the tools the service executes itself, with authority, when a model
 * calls them (from a step's output or `POST /v1/agents/{id}/tool-calls`). Each tool states
 * which agents have it in scope; the same predicate decides what is listed and what may run,
 * so a schema is never shown to an agent that cannot execute it.
 */
import type { AgentCredential } from '../contract/index.js';
import type { ToolSchema } from '../domain/step-render.js';
import type { LiveAgent } from '../agents/live-agent.js';

export interface ToolExecution {
  agent: LiveAgent;
  toolCallId: string;
  signal?: AbortSignal;
  /**
   * Called by a tool in the synchronous span of its effect (before it awaits durability), so
   * whatever the caller records about the call (an idempotency key) commits with the effect.
   */
  accepted?: (outcome: ToolOutcome) => void;
}

export interface ToolOutcome {
  /** The canonical value. */
  output: unknown;
  /** The rendered text the model reads as the tool result. */
  content: string;
  /** Children this call started or cold-resumed, with their new tokens, for the backend. */
  spawned?: AgentCredential[];
  resumed?: AgentCredential[];
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

  /**
   * The tools this agent's model sees: global tools in scope and allowed by the agent's
   * `toolFilter`, then the tools installed into its own scope (never filtered).
   */
  listFor(agent: LiveAgent): ToolSchema[] {
    const global = [...this.tools.values()].filter((tool) => this.globalFor(agent, tool));
    return [...global, ...agent.scope.list()].map(({ name, description, inputSchema }) => ({ name, description, inputSchema }));
  }

  /** The tool this agent may run under that name, or undefined. */
  find(agent: LiveAgent, name: string): ServiceTool | undefined {
    const scoped = agent.scope.tool(name);
    if (scoped !== undefined) return scoped;
    const tool = this.tools.get(name);
    return tool !== undefined && this.globalFor(agent, tool) ? tool : undefined;
  }

  private globalFor(agent: LiveAgent, tool: ServiceTool): boolean {
    const allow = agent.header.toolFilter?.allow;
    return tool.inScope(agent) && (allow === undefined || allow.includes(tool.name));
  }
}
