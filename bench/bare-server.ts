/**
 * A truly bare Fastify server beside the app: no logger, no hooks, no plugins, one route that
 * validates the same body as the app's baseline route (bench/baseline-route.ts) with Fastify's
 * default validator and answers the same constant. What the app's baseline costs per request
 * beyond this is what the app adds to every request. Prints `{"url": ...}` once listening, as
 * the service's own start-up line does.
 */
import Fastify from 'fastify';
import { BASELINE_BODY } from './baseline-route.js';

const app = Fastify({ logger: false });
app.post('/bench/baseline', { schema: { body: BASELINE_BODY } }, async () => ({ ok: true }));
const url = await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) });
process.stdout.write(`${JSON.stringify({ url })}\n`);
process.once('SIGTERM', () => {
  void app.close().then(() => process.exit(0));
});
