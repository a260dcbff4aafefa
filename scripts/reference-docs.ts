/**
 * Writes the generated references (`npm run docs`), or checks that the committed files match
 * (`npm run docs:check`, exit 1 on drift). What is rendered lives in reference-docs-lib.ts.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { REFERENCE_FILES } from './reference-docs-lib.js';

const root = new URL('../', import.meta.url);
const check = process.argv.includes('--check');
let stale = 0;
for (const file of REFERENCE_FILES) {
  const target = fileURLToPath(new URL(file.path, root));
  const generated = file.render();
  if (check) {
    const committed = await readFile(target, 'utf8').catch(() => '');
    if (committed !== generated) {
      process.stderr.write(`${file.path} is out of date: run \`npm run docs\` and commit the result\n`);
      stale += 1;
    }
  } else {
    await writeFile(target, generated);
    process.stdout.write(`wrote ${file.path}\n`);
  }
}
if (check && stale > 0) process.exit(1);
if (check) process.stdout.write('the generated references match their sources\n');
