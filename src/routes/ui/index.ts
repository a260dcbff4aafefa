/**
 * The forest view: a static web app (src/ui, copied to dist/ui by the build) served at `/ui`
 * (the live roots) and `/ui/forests/{rootId}` (one forest), its modules and stylesheet under
 * `/ui/assets/`. The shell holds no data, so it is public (see auth.ts); every data call the
 * page makes goes to the /v1 API with the operator key. Hidden from the OpenAPI document.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';

/** src/ui next to src/routes when run from source, dist/ui next to dist/routes when built. */
const UI_DIR = fileURLToPath(new URL('../../ui/', import.meta.url));

/** The page loads only its own modules and stylesheet, and talks only to this origin. */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

export const uiRoutes: FastifyPluginAsync = async (app) => {
  const shell = readFileSync(`${UI_DIR}index.html`, 'utf8');
  const sendShell = (reply: FastifyReply): FastifyReply =>
    reply
      .type('text/html; charset=utf-8')
      .header('cache-control', 'no-cache')
      .header('content-security-policy', CONTENT_SECURITY_POLICY)
      .header('referrer-policy', 'no-referrer')
      .header('x-content-type-options', 'nosniff')
      .send(shell);

  await app.register(fastifyStatic, {
    root: `${UI_DIR}assets`,
    prefix: '/ui/assets/',
    decorateReply: false,
    index: false,
    schemaHide: true,
    setHeaders: (reply) => void reply.header('x-content-type-options', 'nosniff'),
  });
  for (const url of ['/ui', '/ui/', '/ui/forests/:rootId']) {
    app.get(url, { schema: { hide: true } }, async (_request, reply) => sendShell(reply));
  }
};
