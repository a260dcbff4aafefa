/**
 * The build's second half: the forest view's static files (src/ui) are not TypeScript, so tsc
 * leaves them behind; this copies them to dist/ui, where the built service serves them from.
 * The copy replaces the previous one, so a file removed from src/ui is gone from dist/ui too.
 */
import { cpSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const source = fileURLToPath(new URL('../src/ui', import.meta.url));
const target = fileURLToPath(new URL('../dist/ui', import.meta.url));
rmSync(target, { recursive: true, force: true });
cpSync(source, target, { recursive: true });
