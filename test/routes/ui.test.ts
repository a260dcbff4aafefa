/**
 * The forest view's routes with operator keys configured: the shell and its assets are public
 * (they hold no data), carry a strict Content-Security-Policy, stay out of the OpenAPI
 * document, and serve nothing outside src/ui; the data behind them still needs a key.
 */
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { startHarness } from '../fixtures/harness.js';

const ASSETS = fileURLToPath(new URL('../../src/ui/assets/', import.meta.url));

describe('the forest view routes', () => {
  it('serve the same shell at /ui and /ui/forests/{rootId} without a key, with a Content-Security-Policy', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    for (const url of ['/ui', '/ui/', '/ui/forests/some-root']) {
      const res = await h.app.inject({ method: 'GET', url });
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['content-type']).toMatch(/^text\/html/);
      expect(res.headers['content-security-policy']).toContain("script-src 'self'");
      expect(res.headers['content-security-policy']).toContain("connect-src 'self'");
      expect(res.body).toContain('<script type="module" src="/ui/assets/app.js">');
    }
    expect((await h.app.inject({ method: 'GET', url: '/v1/agents' })).statusCode).toBe(401);
  });

  it('serve every asset without a key, as JavaScript or CSS', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    const files = readdirSync(ASSETS);
    expect(files).toContain('app.js');
    for (const file of files) {
      const res = await h.app.inject({ method: 'GET', url: `/ui/assets/${file}` });
      expect(res.statusCode, file).toBe(200);
      expect(res.headers['content-type'], file).toMatch(file.endsWith('.css') ? /^text\/css/ : /^(text|application)\/javascript/);
      expect(res.headers['x-content-type-options']).toBe('nosniff');
    }
  });

  it('serve nothing outside the assets and answer an unknown asset 404', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    for (const url of ['/ui/assets/nope.js', '/ui/assets/../index.html', '/ui/assets/%2e%2e/%2e%2e/routes/auth.ts', '/ui/forests/a/b']) {
      const res = await h.app.inject({ method: 'GET', url });
      expect(res.statusCode, url).toBeGreaterThanOrEqual(400);
      expect(res.body, url).not.toContain('registerOperatorAuth');
    }
  });

  it('stay out of the OpenAPI document', async () => {
    const h = await startHarness({ apiKeys: ['k1'] });
    const document = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json() as { paths: Record<string, unknown> };
    expect(Object.keys(document.paths).filter((path) => path.startsWith('/ui'))).toEqual([]);
  });
});
