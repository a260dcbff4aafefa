/**
 * Service-owned tools: the tools the service executes itself, with authority, when a model
 * calls them (from a step's output or `POST /v1/agents/{id}/tool-calls`). Each tool states
 * which agents have it in scope, and the agent's grants (grants.ts) say which it may call; the
 * same predicates decide what is listed and what may run, so a schema is never shown to an
 * agent that cannot execute it, and a tool it may not call is unknown to it.
 *
 * A tool of a tenant (its MCP server's, its declared backend tool) does not exist for any
 * other agent: not listed, not run, not refused as withheld; a call to its name is answered
 * as a call to a name no tool has (an admin's agents see only global tools).
 */
import type { AgentCredential } from '../contract/index.js';
import type { ToolSchema } from '../domain/step-render.js';
import type { LiveAgent } from '../agents/live-agent.js';

export interface ToolExecution {
  agent: LiveAgent;
  toolCallId: string;
  /** The call's effect key (effect-keys.ts). */
  effectKey: string;
  /**
   * Records, durably, that the call is about to take effect (a tool-started entry): a tool whose
   * effect lies outside the service calls it before that effect.
   */
  started(): Promise<void>;
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
  /** The tool answered that the call failed (an MCP server's `isError`): recorded as an error result. */
  isError?: boolean;
  /** Children this call started or cold-resumed, with their new tokens, for the backend. */
  spawned?: AgentCredential[];
  resumed?: AgentCredential[];
}

export interface ServiceTool extends ToolSchema {
  /** Who runs it, for traces and metrics: the service itself, an MCP server, or the operator's backend (never run here). */
  owner?: 'service' | 'mcp' | 'backend';
  /** Calls to it of one step may run at the same time (their results are still recorded in order). */
  concurrent?: boolean;
  /**
   * A call the service had started and left without a result when it stopped: run it again
   * with its effect key (`rerun`), or record that its outcome is unknown (`unknown`). Absent:
   * the call gets the restart's stand-in result like a backend's.
   */
  afterRestart?: 'rerun' | 'unknown';
  /** The tenant whose tool it is (its MCP server's, its declared backend tool); absent: every agent's. */
  tenantId?: string | undefined;
  inScope(agent: LiveAgent): boolean;
  execute(input: unknown, exec: ToolExecution): Promise<ToolOutcome> | ToolOutcome;
}

export class ToolRegistry {
  private readonly tools = new Map<string, ServiceTool>();

  constructor(private readonly grants: { allows(agentId: string, name: string): boolean }) {}

  /** Register a tool; returns its disposer (idempotent). */
  register(tool: ServiceTool): () => void {
    if (this.tools.has(tool.name)) throw new Error(`tool "${tool.name}" is already registered`);
    this.tools.set(tool.name, tool);
    return () => {
      if (this.tools.get(tool.name) === tool) this.tools.delete(tool.name);
    };
  }

  /** Every registered tool's name an agent of `tenantId` (undefined: an admin's) may have, sorted. */
  known(tenantId: string | undefined): string[] {
    return [...this.tools.values()].filter((tool) => visibleTo(tenantId, tool)).map((tool) => tool.name).sort();
  }

  /**
   * The tools this agent's model sees: global tools in scope, granted, and allowed by the
   * agent's `toolFilter`, then the tools installed into its own scope (never filtered).
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

  /**
   * Whether `name` is a registered tool this agent would have but for its grants: a call to it
   * is refused like an unknown tool's, never left to the backend.
   */
  withheld(agent: LiveAgent, name: string): boolean {
    const tool = this.tools.get(name);
    return tool !== undefined && visibleTo(agent.header.tenantId, tool) && agent.scope.tool(name) === undefined && !this.grants.allows(agent.id, name);
  }

  private globalFor(agent: LiveAgent, tool: ServiceTool): boolean {
    const allow = agent.header.toolFilter?.allow;
    return visibleTo(agent.header.tenantId, tool) && tool.inScope(agent) && (allow === undefined || allow.includes(tool.name)) && this.grants.allows(agent.id, tool.name);
  }
}

/** A tenant's tool exists for that tenant's agents only; a global one for every agent. */
function visibleTo(tenantId: string | undefined, tool: ServiceTool): boolean {
  return tool.tenantId === undefined || tool.tenantId === tenantId;
}
