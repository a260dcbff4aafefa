/**
 * The OpenTelemetry SDK as this service runs it: a Node tracer provider (its AsyncLocalStorage
 * context manager carries the active span across awaits, which is how a tool call's span
 * reaches the messages it queues), a batch span processor and the OTLP/HTTP (JSON) exporter.
 * The processor and the exporter read the standard variables themselves (OTEL_BSP_*,
 * OTEL_EXPORTER_OTLP_* endpoint, headers and timeout); the resource takes OTEL_RESOURCE_ATTRIBUTES
 * and the service name. Loaded only by trace-export.ts's dynamic import, when traces are exported.
 */
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import { ForestSpans } from './forest-spans.js';
import type { TraceExport, TracingOptions } from './tracing.js';

/** The instrumentation scope of every span. */
export const TRACER_NAME = 'agentforest';

export function startOtel(options: TracingOptions): TraceExport {
  const resource = defaultResource()
    .merge(detectResources({ detectors: [envDetector] }))
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: options.serviceName }));
  const provider = new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())] });
  provider.register();
  const tracer = provider.getTracer(TRACER_NAME);
  return {
    tracing: (deps) => new ForestSpans(tracer, deps, options),
    shutdown: () => provider.shutdown(),
  };
}
