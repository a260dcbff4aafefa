/**
 * Starting the trace export: the OpenTelemetry SDK's modules (otel-sdk.ts) are loaded here, by a
 * dynamic import, only when traces are exported; with tracing off nothing of OpenTelemetry is
 * ever loaded.
 */
import type { TraceExport, TracingOptions } from './tracing.js';

/** Start the SDK. The exporter reads the standard OTEL_EXPORTER_OTLP_* variables itself (endpoint, headers, timeout). */
export async function startTraceExport(options: TracingOptions): Promise<TraceExport> {
  const { startOtel } = await import('./otel-sdk.js');
  return startOtel(options);
}
