import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { parse } from 'yaml';
import { benchRoutes } from '../../bench/baseline-route.js';
import { buildApp } from '../../src/app.js';
import { createLogger } from '../../src/logger.js';
import { MemorySessionStore } from '../../src/adapters/memory/memory-store.js';
import { createSystem } from '../../src/composition/system.js';

const opened: FastifyInstance[] = [];

/** The app as src/start.ts builds it; bench/server.ts registers the benchmark routes on it. */
async function app(withBenchRoutes: boolean): Promise<FastifyInstance> {
  const logger = createLogger('silent');
  const instance = await buildApp({ system: createSystem({ store: new MemorySessionStore(), logger }), logger });
  if (withBenchRoutes) await instance.register(benchRoutes);
  opened.push(instance);
  return instance;
}

afterEach(async () => {
  for (const instance of opened.splice(0)) await instance.close();
});

const report = { name: 'report', input: { output: 'a finding' } };

describe('benchmark helper routes', () => {
  it('answer only when the benchmark registers them', async () => {
    const off = await app(false);
    expect((await off.inject({ method: 'POST', url: '/bench/baseline', payload: report })).statusCode).toBe(404);
    expect((await off.inject({ method: 'GET', url: '/bench/memory' })).statusCode).toBe(404);

    const on = await app(true);
    const res = await on.inject({ method: 'POST', url: '/bench/baseline', payload: report });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ ok: true });
  });

  it('the baseline validates the same body as a tool call', async () => {
    const on = await app(true);
    const res = await on.inject({ method: 'POST', url: '/bench/baseline', payload: { name: 'report' } });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ code: 'VALIDATION' });
  });

  it('memory reports resident and heap bytes, and whether a full collection ran first', async () => {
    const on = await app(true);
    const body = (await on.inject({ method: 'GET', url: '/bench/memory' })).json() as { collected: boolean; rss: number; heapUsed: number };
    expect(body.collected).toBe(typeof (globalThis as { gc?: unknown }).gc === 'function');
    expect(body.rss).toBeGreaterThan(body.heapUsed);
    expect(body.heapUsed).toBeGreaterThan(0);
  });

  it('stay out of the API document, even when registered', async () => {
    const on = await app(true);
    await on.ready();
    const paths = Object.keys((on as unknown as { swagger(): { paths: Record<string, unknown> } }).swagger().paths);
    expect(paths.some((p) => p.startsWith('/bench'))).toBe(false);
    expect(paths).toContain('/v1/agents');
    const committed = parse(readFileSync(new URL('../../openapi.yaml', import.meta.url), 'utf8')) as { paths: Record<string, unknown> };
    expect(Object.keys(committed.paths).some((p) => p.startsWith('/bench'))).toBe(false);
    expect(Object.keys(committed.paths)).toContain('/v1/agents');
  });
});
