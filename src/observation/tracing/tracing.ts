/**
 * The tracing port: what the services tell the traces, and NO_TRACING, whose methods do
 * nothing. Traces are off unless an OTLP endpoint is configured; then start.ts loads the
 * OpenTelemetry implementation (otel-sdk.ts, forest-spans.ts) with a dynamic import
 * (trace-export.ts), so with tracing off no OpenTelemetry module is loaded and the services
 * call only these no-ops.
 *
 * Invariants: nothing here changes what the service does (a span that cannot be made is
 * dropped, never an error); no agent token or operator key is put on a span, and message
 * content only when asked for (AGENTFOREST_OTEL_CONTENT=on).
 */
import type { ToolCall } from '../../domain/message.js';
import type { AgentRegistry } from '../../agents/agent-registry.js';
import type { LiveAgent } from '../../agents/live-agent.js';
import type { RuntimeObserver } from '../runtime-observer.js';
import type { ServiceTool, ToolExecution, ToolOutcome } from '../../tools/tool-registry.js';

export interface Tracing {
  /**
   * What the traces hear of the runtime: entries as they are queued (turn, step and message
   * spans), inbox changes (a queued message remembers what caused it), agents leaving (what was
   * kept for them goes). Undefined when tracing is off, so nothing observes.
   */
  readonly observer: RuntimeObserver | undefined;
  /** A backend named the model that answered the agent's open step (before its output is recorded). */
  answeredBy(agent: LiveAgent, model: string | undefined): void;
  /** Run a service-owned tool call, under its span when tracing: what it delivers is caused by it. */
  runTool(tool: ServiceTool, call: ToolCall, exec: ToolExecution): Promise<ToolOutcome> | ToolOutcome;
  /**
   * Runs the rest of a request's handling in the trace its W3C `traceparent` header names, so
   * a turn an operator's message starts continues the caller's trace; undefined when off.
   */
  readonly requestContext: ((headers: Readonly<Record<string, string | string[] | undefined>>, next: () => void) => void) | undefined;
}

/** Tracing off: every method does nothing (runTool just runs the tool). */
export const NO_TRACING: Tracing = {
  observer: undefined,
  answeredBy: () => undefined,
  runTool: (tool, call, exec) => tool.execute(call.input, exec),
  requestContext: undefined,
};

/** What the system hands the OpenTelemetry tracing when it builds it. */
export interface TracingDeps {
  registry: AgentRegistry;
}

/** Builds the system's tracing once the objects it reads exist (system.ts calls it once). */
export type TracingFactory = (deps: TracingDeps) => Tracing;

export interface TracingOptions {
  /** `service.name` of the resource (OTEL_SERVICE_NAME, default agentforest). */
  serviceName: string;
  /** Put message content, tool arguments and results on spans (AGENTFOREST_OTEL_CONTENT=on). */
  content: boolean;
}

/** A started OpenTelemetry SDK exporting over OTLP/HTTP (trace-export.ts starts it). */
export interface TraceExport {
  tracing: TracingFactory;
  /** Export what is buffered, then stop (after the drain). */
  shutdown(): Promise<void>;
}

/**
 * Whether traces are exported, from the standard OpenTelemetry variables: an OTLP endpoint is
 * set, and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none turns them off.
 */
export function tracesWanted(env: Readonly<Record<string, string | undefined>>): boolean {
  const set = (name: string): boolean => (env[name] ?? '').trim() !== '';
  if (!set('OTEL_EXPORTER_OTLP_ENDPOINT') && !set('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT')) return false;
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '').split(',').map((e) => e.trim().toLowerCase());
  return !exporters.includes('none');
}
