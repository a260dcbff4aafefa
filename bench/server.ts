/**
 * The server the benchmarks start: the service exactly as src/server.ts starts it (the same
 * start(), config and build), plus the benchmark's own routes (bench/baseline-route.ts).
 * Compiled with the same compiler options as dist/ (bench/tsconfig.server.json).
 */
import { start } from '../src/start.js';
import { benchRoutes } from './baseline-route.js';

await start({ plugins: [benchRoutes] });
