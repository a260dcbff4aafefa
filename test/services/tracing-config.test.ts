/**
 * When traces are exported: only with an OTLP endpoint in the standard OpenTelemetry variables,
 * never with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none; the service name and the
 * content switch; and the refusals an operator can act on. With tracing off, nothing the
 * server loads at start imports an OpenTelemetry module: the SDK comes in by dynamic import.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { configErrorOf } from '../fixtures/config-error.js';

const ENDPOINT = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' };

describe('tracing configuration', () => {
  it('exports no traces unless an OTLP endpoint is set', () => {
    expect(loadConfig({}).tracing).toEqual({ export: false, serviceName: 'agentforest', content: false });
    expect(loadConfig({ OTEL_SERVICE_NAME: 'forest-a' }).tracing.export).toBe(false);
  });

  it('exports traces with either endpoint variable, under OTEL_SERVICE_NAME', () => {
    expect(loadConfig(ENDPOINT).tracing.export).toBe(true);
    expect(loadConfig({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' }).tracing.export).toBe(true);
    expect(loadConfig({ ...ENDPOINT, OTEL_SERVICE_NAME: 'forest-a' }).tracing.serviceName).toBe('forest-a');
  });

  it('honours OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none as off', () => {
    expect(loadConfig({ ...ENDPOINT, OTEL_SDK_DISABLED: 'true' }).tracing.export).toBe(false);
    expect(loadConfig({ ...ENDPOINT, OTEL_SDK_DISABLED: 'false' }).tracing.export).toBe(true);
    expect(loadConfig({ ...ENDPOINT, OTEL_TRACES_EXPORTER: 'none' }).tracing.export).toBe(false);
    expect(loadConfig({ ...ENDPOINT, OTEL_TRACES_EXPORTER: 'otlp' }).tracing.export).toBe(true);
  });

  it('puts content on spans only with AGENTFOREST_OTEL_CONTENT=on', () => {
    expect(loadConfig({ ...ENDPOINT, AGENTFOREST_OTEL_CONTENT: 'on' }).tracing.content).toBe(true);
    expect(loadConfig({ ...ENDPOINT, AGENTFOREST_OTEL_CONTENT: 'off' }).tracing.content).toBe(false);
  });

  it('refuses a bad AGENTFOREST_OTEL_CONTENT and names the allowed values', () => {
    expect(configErrorOf({ AGENTFOREST_OTEL_CONTENT: 'yes' }).message).toContain('AGENTFOREST_OTEL_CONTENT="yes": must be one of on, off');
  });

  it('refuses an OTLP protocol other than http/json while exporting', () => {
    expect(configErrorOf({ ...ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).message).toContain('OTEL_EXPORTER_OTLP_PROTOCOL="grpc"');
    expect(configErrorOf({ ...ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf' }).message).toContain('set it to http/json');
    expect(loadConfig({ ...ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }).tracing.export).toBe(true);
    expect(loadConfig({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).tracing.export).toBe(false);
  });
});

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** The static imports of a source file (type-only ones are erased, dynamic ones load lazily). */
function staticImports(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1');
  return [...code.matchAll(/^\s*(?:import|export)\s+(?!type\b)[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/gm), ...code.matchAll(/^\s*import\s*['"]([^'"]+)['"]/gm)].map((m) => m[1]!);
}

/** Every package reached from `entry` through static imports of project files. */
function packagesReached(entry: string): Map<string, string> {
  const reached = new Map<string, string>();
  const seen = new Set<string>();
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const specifier of staticImports(readFileSync(file, 'utf8'))) {
      if (specifier.startsWith('.')) visit(resolve(dirname(file), specifier.replace(/\.js$/, '.ts')));
      else if (!reached.has(specifier)) reached.set(specifier, relative(ROOT, file));
    }
  };
  visit(join(ROOT, entry));
  return reached;
}

describe('tracing off loads no OpenTelemetry module', () => {
  it('the server start imports OpenTelemetry only dynamically', () => {
    const reached = packagesReached('src/start.ts');
    expect(reached.has('fastify'), 'the walk follows the start').toBe(true);
    const otel = [...reached].filter(([specifier]) => specifier.startsWith('@opentelemetry/'));
    expect(otel.map(([specifier, file]) => `${specifier} (from ${file})`)).toEqual([]);
  });

  it('the OpenTelemetry implementation does import the SDK (the walk would see it)', () => {
    const reached = packagesReached('src/observation/tracing/otel-sdk.ts');
    expect([...reached.keys()]).toEqual(expect.arrayContaining(['@opentelemetry/api', '@opentelemetry/sdk-trace-node', '@opentelemetry/exporter-trace-otlp-http']));
  });
});
