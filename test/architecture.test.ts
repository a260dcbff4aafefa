/**
 * The dependency direction (routes and plugins -> services -> domain; the wire contract, used
 * by routes and services, imports only TypeBox and the domain; nothing imports routes or
 * plugins but the app) and the
 * purity of the domain (no framework, logger, node: module, clock, randomness or timers),
 * checked on the source text so a violation names the file and the specifier.
 */
import { describe, it, expect } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SRC = join(ROOT, 'src');

interface SourceFile {
  /** Path relative to the project root, with forward slashes. */
  path: string;
  text: string;
}

function sourceFiles(layer: string): SourceFile[] {
  const dir = join(SRC, layer);
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.ts'))
    .sort()
    .map((name) => {
      const absolute = join(dir, name);
      return { path: relative(ROOT, absolute).split(sep).join('/'), text: readFileSync(absolute, 'utf8') };
    });
}

/** Removes block and line comments so prose about a forbidden name is not a use of it. */
function stripComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1');
}

const IMPORT_PATTERNS = [
  /\b(?:import|export)\s+(?:type\s+)?[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/g, // import x from 'a', export { y } from 'b'
  /\bimport\s*['"]([^'"]+)['"]/g, // import 'side-effect'
  /\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g, // import('dynamic')
  /\brequire\s*\(\s*['"]([^'"]+)['"]\s*\)/g, // require('cjs')
];

function importSpecifiers(text: string): string[] {
  const code = stripComments(text);
  return IMPORT_PATTERNS.flatMap((pattern) => [...code.matchAll(pattern)].map((m) => m[1] ?? ''));
}

/** A relative specifier resolved to a root-relative path; bare specifiers are returned as is. */
function resolveSpecifier(file: SourceFile, specifier: string): string {
  if (!specifier.startsWith('.')) return specifier;
  return relative(ROOT, resolve(ROOT, dirname(file.path), specifier)).split(sep).join('/');
}

interface Import {
  file: string;
  specifier: string;
  target: string;
}

function importsOf(files: readonly SourceFile[]): Import[] {
  return files.flatMap((file) =>
    importSpecifiers(file.text).map((specifier) => ({ file: file.path, specifier, target: resolveSpecifier(file, specifier) })),
  );
}

const underLayer = (layer: string) => (target: string) => target === `src/${layer}` || target.startsWith(`src/${layer}/`);
/** The runtime's folders: everything between the routes and the domain. */
const RUNTIME = ['agents', 'budgets', 'children', 'cluster', 'driver', 'observation', 'sessions', 'steps', 'tools'] as const;
const underRuntime = (target: string): boolean => RUNTIME.some((layer) => underLayer(layer)(target));
const runtimeFiles = (): SourceFile[] => RUNTIME.flatMap((layer) => sourceFiles(layer));
const NODE_BUILTINS = new Set(builtinModules);
const FRAMEWORK = /^(?:fastify|pino|@fastify\/[^/]+)(?:\/.*)?$/;

function isForbiddenInDomain(target: string): boolean {
  return (
    underRuntime(target) ||
    underLayer('adapters')(target) ||
    underLayer('composition')(target) ||
    underLayer('routes')(target) ||
    FRAMEWORK.test(target) ||
    target.startsWith('node:') ||
    NODE_BUILTINS.has(target.split('/')[0] ?? target)
  );
}

const describeImport = (i: Import): string => `${i.file} imports '${i.specifier}'`;

const FORBIDDEN_GLOBALS: Array<[string, RegExp]> = [
  ['Date.now', /\bDate\s*\.\s*now\b/],
  ['Math.random', /\bMath\s*\.\s*random\b/],
  ['setTimeout', /\bsetTimeout\b/],
  ['setImmediate', /\bsetImmediate\b/],
  ['queueMicrotask', /\bqueueMicrotask\b/],
];

describe('import parsing', () => {
  it('finds static, re-export, type-only, side-effect, dynamic and multi-line imports and ignores comments', () => {
    const sample = [
      "import { a } from './a.js';",
      "import type { B } from '../b.js';",
      "export { c } from './c.js';",
      "export * from 'fastify';",
      "import 'node:fs';",
      'const d = await import("pino");',
      'import {',
      '  e,',
      '  f,',
      "} from '../services/e.js';",
      "// import { g } from '../routes/g.js';",
      "/* import { h } from 'node:http'; */",
    ].join('\n');
    expect(importSpecifiers(sample).sort()).toEqual(['../b.js', '../services/e.js', './a.js', './c.js', 'fastify', 'node:fs', 'pino']);
  });

  it('resolves relative specifiers against the importing file', () => {
    const file = { path: 'src/domain/turn-machine.ts', text: '' };
    expect(resolveSpecifier(file, '../agents/live-agent.js')).toBe('src/agents/live-agent.js');
    expect(resolveSpecifier(file, './errors.js')).toBe('src/domain/errors.js');
    expect(resolveSpecifier(file, 'fastify')).toBe('fastify');
  });

  it('classifies framework, node and layer imports as forbidden in the domain', () => {
    for (const target of ['fastify', '@fastify/swagger', 'pino', 'node:crypto', 'crypto', 'fs/promises', 'src/agents/x.js', 'src/adapters/memory/memory-store.js', 'src/routes/agents/index.js']) {
      expect(isForbiddenInDomain(target), target).toBe(true);
    }
    for (const target of ['src/domain/errors.js', 'fastify-like', 'pinot']) {
      expect(isForbiddenInDomain(target), target).toBe(false);
    }
  });
});

describe('architecture', () => {
  const domain = sourceFiles('domain');
  const services = runtimeFiles();
  const contract = sourceFiles('contract');
  const plugins = sourceFiles('plugins');

  it('the layers being checked contain the files we expect', () => {
    expect(domain.map((f) => f.path)).toContain('src/domain/turn-machine.ts');
    expect(services.map((f) => f.path)).toContain('src/agents/live-agent.ts');
    expect(importsOf(domain).map((i) => i.target)).toContain('src/domain/errors.js');
    expect(importsOf(services).some((i) => underLayer('domain')(i.target))).toBe(true);
  });

  it('the domain imports nothing from services or routes, nor fastify, pino or any node module', () => {
    expect(importsOf(domain).filter((i) => isForbiddenInDomain(i.target)).map(describeImport)).toEqual([]);
  });

  it('nothing in services or the domain imports a route', () => {
    expect(
      importsOf([...services, ...domain])
        .filter((i) => underLayer('routes')(i.target))
        .map(describeImport),
    ).toEqual([]);
  });

  it('the wire contract imports only TypeBox, the domain and itself', () => {
    expect(contract.map((f) => f.path)).toContain('src/contract/index.ts');
    expect(
      importsOf(contract)
        .filter((i) => i.target !== '@sinclair/typebox' && !underLayer('domain')(i.target) && !underLayer('contract')(i.target))
        .map(describeImport),
    ).toEqual([]);
  });

  it('the domain does not import the wire contract; nothing below the app imports a plugin', () => {
    expect(importsOf(domain).filter((i) => underLayer('contract')(i.target)).map(describeImport)).toEqual([]);
    expect(plugins.map((f) => f.path)).toContain('src/plugins/json-bodies.ts');
    expect(
      importsOf([...services, ...domain, ...contract, ...sourceFiles('routes')])
        .filter((i) => underLayer('plugins')(i.target))
        .map(describeImport),
    ).toEqual([]);
  });

  it('the domain never reads the clock, randomness or timers', () => {
    const offences = domain.flatMap((file) => {
      const code = stripComments(file.text);
      return FORBIDDEN_GLOBALS.filter(([, pattern]) => pattern.test(code)).map(([name]) => `${file.path} uses ${name}`);
    });
    expect(offences).toEqual([]);
  });

  it('the forbidden-global check recognises each name in code but not in comments', () => {
    for (const [name, pattern] of FORBIDDEN_GLOBALS) {
      expect(pattern.test(stripComments(`const x = ${name}();`)), name).toBe(true);
      expect(pattern.test(stripComments(`// never call ${name}\n/* nor ${name} */`)), name).toBe(false);
    }
  });
});
