/**
 * The documentation cannot drift: the generated references equal what their generator makes
 * from the config schema and the error-code registry, each lists exactly what its source
 * holds (checked both ways on the committed text), the README stays short, and every
 * relative link in the README and docs/ names a file that exists.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { REFERENCE_FILES } from '../scripts/reference-docs-lib.js';
import { EnvSchema } from '../src/config.js';
import { ERROR_CODES } from '../src/domain/errors.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const read = (path: string): string => readFileSync(join(ROOT, path), 'utf8');

/** The first column of every table row whose first cell is one backquoted name. */
function tableNames(markdown: string): string[] {
  return [...markdown.matchAll(/^\| `([A-Z][A-Z0-9_]*)` \|/gm)].map((m) => m[1] ?? '');
}

function markdownFiles(): string[] {
  const docs = readdirSync(join(ROOT, 'docs'), { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.md'))
    .map((name) => join('docs', name).split(sep).join('/'));
  return ['README.md', 'bench/README.md', ...docs.sort()];
}

const withoutCode = (markdown: string): string => markdown.replace(/^```[\s\S]*?^```/gm, '');

/** Relative link targets outside fenced code (URLs skipped), as [path, fragment]; '' for none. */
function relativeLinks(markdown: string): [string, string][] {
  return [...withoutCode(markdown).matchAll(/\]\(([^)\s]+)\)/g)]
    .map((m) => m[1] ?? '')
    .filter((target) => !/^[a-z][a-z+.-]*:/i.test(target))
    .map((target) => {
      const [path = '', fragment = ''] = target.split('#');
      return [path, fragment];
    });
}

/** The anchors GitHub gives a file's headings: lower case, punctuation dropped, spaces as hyphens. */
function anchors(markdown: string): Set<string> {
  return new Set(
    [...withoutCode(markdown).matchAll(/^#{1,6} (.+)$/gm)].map((m) =>
      (m[1] ?? '').trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-'),
    ),
  );
}

describe('generated references', () => {
  it.each(REFERENCE_FILES.map((f) => [f.path, f] as const))('%s equals what `npm run docs` generates', (path, file) => {
    expect(read(path)).toBe(file.render());
  });

  it('errors.md documents every error code, and only codes that exist', () => {
    const documented = tableNames(read('docs/reference/errors.md'));

    expect([...documented].sort()).toEqual([...ERROR_CODES].sort());
    expect(new Set(documented).size).toBe(documented.length);
  });

  it('configuration.md documents every environment variable, and only variables the schema reads', () => {
    const documented = tableNames(read('docs/reference/configuration.md'));

    expect([...documented].sort()).toEqual(Object.keys(EnvSchema.properties).sort());
    expect(new Set(documented).size).toBe(documented.length);
  });

  it('every environment variable has a description', () => {
    const undescribed = Object.entries(EnvSchema.properties)
      .filter(([, schema]) => typeof schema.description !== 'string' || schema.description.trim() === '')
      .map(([name]) => name);

    expect(undescribed).toEqual([]);
  });
});

describe('user documentation', () => {
  it('README.md is at most 250 lines', () => {
    expect(read('README.md').split('\n').length).toBeLessThanOrEqual(250);
  });

  it('every relative link in README.md and docs/ points to a file that exists, and to a heading in it', () => {
    const broken = markdownFiles().flatMap((file) =>
      relativeLinks(read(file)).flatMap(([path, fragment]) => {
        const target = path === '' ? join(ROOT, file) : resolve(ROOT, dirname(file), path);
        if (!existsSync(target)) return [`${file} -> ${path}: no such file`];
        if (fragment !== '' && target.endsWith('.md') && !anchors(readFileSync(target, 'utf8')).has(fragment)) {
          return [`${file} -> ${path}#${fragment}: no such heading`];
        }
        return [];
      }),
    );

    expect(broken).toEqual([]);
  });

  it('the link check reads relative links outside code, skips URLs, and knows headings by their anchors', () => {
    expect(relativeLinks('see [a](docs/a.md#x), [b](https://x.org), [c](#here)\n```\n[d](e.md)\n```\n')).toEqual([
      ['docs/a.md', 'x'],
      ['', 'here'],
    ]);
    expect(relativeLinks('[up](../README.md)')).toEqual([['../README.md', '']]);
    expect([...anchors('## Model Experience: `report`\n### Activation: resident, settled, closed\n')]).toEqual([
      'model-experience-report',
      'activation-resident-settled-closed',
    ]);
  });
});
