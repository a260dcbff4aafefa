/**
 * The wire contract's shared schemas (src/contract/), added to the app so that route schemas
 * can refer to them by `$id`: validation resolves the references (src/plugins/json-bodies.ts)
 * and the OpenAPI document lists each schema once, as a component (src/plugins/openapi.ts).
 */
import { CONTRACT_SCHEMAS } from '../contract/index.js';
import { rootPlugin } from './root-plugin.js';

export const wireContract = rootPlugin('wire-contract', async (app) => {
  for (const schema of CONTRACT_SCHEMAS) app.addSchema(schema);
});
