/**
 * An agent incarnation's scope: the tools installed into that incarnation alone. A scope
 * lives and dies with its incarnation; a re-created or resumed agent gets a new one.
 */
import type { ServiceTool } from './tool-registry.js';

/**
 * The tools installed into one agent incarnation alone (child-scoped, e.g. `report`). Most
 * agents never get one, so the map is made when first asked for.
 */
export class AgentScope {
  private installed: Map<string, ServiceTool> | undefined;

  /** The installed tools, to install or remove one. */
  get tools(): Map<string, ServiceTool> {
    return (this.installed ??= new Map());
  }

  /** The tool installed under this name, if any (without making the map). */
  tool(name: string): ServiceTool | undefined {
    return this.installed?.get(name);
  }

  /** Every installed tool (without making the map). */
  list(): Iterable<ServiceTool> {
    return this.installed?.values() ?? [];
  }
}
