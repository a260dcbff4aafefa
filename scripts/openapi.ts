/**
 * Generates openapi.yaml from the app's route schemas (`npm run openapi`), or checks that the
 * committed file matches (`npm run openapi:check`, exit 1 on drift).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { generateOpenApi } from '../src/openapi-document.js';

const target = fileURLToPath(new URL('../openapi.yaml', import.meta.url));
const generated = await generateOpenApi();

if (process.argv.includes('--check')) {
  const committed = await readFile(target, 'utf8').catch(() => '');
  if (committed !== generated) {
    process.stderr.write('openapi.yaml is out of date: run `npm run openapi` and commit the result\n');
    process.exit(1);
  }
  process.stdout.write('openapi.yaml matches the app\n');
} else {
  await writeFile(target, generated);
  process.stdout.write(`wrote ${target}\n`);
}
