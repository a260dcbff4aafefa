/**
 * Builds the app on a memory store and renders its OpenAPI document as YAML: the single way
 * openapi.yaml is produced, shared by the generator script and the drift test.
 */
import { buildApp } from './app.js';
import { createLogger } from './logger.js';
import { openStore } from './composition/open-store.js';
import { createSystem } from './composition/system.js';

export async function generateOpenApi(): Promise<string> {
  const logger = createLogger('silent');
  const { store } = await openStore({ dataPath: ':memory:' });
  const system = createSystem({ store, logger });
  const app = await buildApp({ system, logger });
  await app.ready();
  const yaml = app.swagger({ yaml: true });
  await app.close();
  return yaml;
}
