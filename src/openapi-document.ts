/**
 * Builds the app on a memory store and renders its OpenAPI document as YAML: the single way
 * openapi.yaml is produced, shared by the generator script and the drift test.
 */
import { buildApp } from './app.js';
import { createLogger } from './logger.js';
import { createSystem } from './composition/system.js';
import { MemorySessionStore } from './adapters/memory/memory-store.js';

export async function generateOpenApi(): Promise<string> {
  const logger = createLogger('silent');
  const system = createSystem({ store: new MemorySessionStore(), logger });
  const app = await buildApp({ system, logger });
  await app.ready();
  const yaml = app.swagger({ yaml: true });
  await app.close();
  return yaml;
}
