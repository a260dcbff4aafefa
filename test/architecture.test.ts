/**
 * The shape of src/, checked on the source text so a violation names the file and the line or
 * specifier.
 *
 * - routes and plugins -> runtime -> domain. The runtime is agents, steps, tools, children,
 *   sessions, driver, budgets, observation and cluster; the domain is pure (no framework,
 *   logger, node: module, clock, randomness or timers). The wire contract imports only TypeBox
 *   and the domain; nothing imports routes or plugins but the app.
 * - adapters -> ports. The memory, SQLite and PostgreSQL adapters implement the store ports
 *   (sessions/session-store.ts, sessions/outbox.ts) and the cluster's database port
 *   (cluster/cluster-database.ts), and import nothing else of the runtime.
 * - composition knows the adapters: composition/open-store.ts picks one and system.ts wires the
 *   runtime to the ports (topology/ holds the Topology and ForestPlacement ports); nothing else
 *   names or casts to a concrete store.
 * - No object sets a collaborator's field after construction, and the routes never branch on
 *   the topology.
 * - The layout stays spread out: no top-level folder holds most of the code, and no folder but
 *   the domain piles up loose files.
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

/**
 * The code of a file with comments, and (unless `keepLiterals`) the inside of string, template
 * and regular-expression literals, turned into spaces (the quotes and the code of a template's
 * `${...}` stay), each newline kept so an offset in it is the same offset in the file. Lighter
 * than a parser; the self-tests below pin what it must tell apart.
 */
function codeOf(text: string, keepLiterals = false): string {
  const out: string[] = [];
  let i = 0;
  // The last few characters of code, whitespace runs collapsed: tells a regex from a division.
  let tail = '';
  const emit = (chunk: string): void => {
    out.push(chunk);
    for (const c of chunk) if (!/\s/.test(c) || !tail.endsWith(' ')) tail = (tail + (/\s/.test(c) ? ' ' : c)).slice(-16);
  };
  const blank = (from: number, to: number): void => {
    out.push(text.slice(from, to).replace(/[^\n]/g, ' '));
  };
  /** A literal's inside: blanked, or kept as written. */
  const inside = (from: number, to: number): void => {
    if (keepLiterals) out.push(text.slice(from, to));
    else blank(from, to);
  };
  const REGEX_MAY_FOLLOW = /(?:^|[(,=:[!&|?{};+\-*%<>~^]|\b(?:return|typeof|case|in|of|void|delete|throw|yield|await))\s*$/;

  const quoted = (quote: string): void => {
    emit(quote);
    const start = ++i;
    while (i < text.length && text[i] !== quote && text[i] !== '\n') i += text[i] === '\\' ? 2 : 1;
    inside(start, Math.min(i, text.length));
    if (text[i] === quote) {
      i++;
      emit(quote);
    }
  };
  const regex = (): void => {
    emit('/');
    const start = ++i;
    let inClass = false;
    while (i < text.length && text[i] !== '\n' && (inClass || text[i] !== '/')) {
      if (text[i] === '\\') i++;
      else if (text[i] === '[') inClass = true;
      else if (text[i] === ']') inClass = false;
      i++;
    }
    inside(start, Math.min(i, text.length));
    if (text[i] === '/') {
      i++;
      emit('/');
    }
  };
  const template = (): void => {
    emit('`');
    let start = ++i;
    while (i < text.length) {
      if (text[i] === '\\') i += 2;
      else if (text[i] === '`') break;
      else if (text[i] === '$' && text[i + 1] === '{') {
        inside(start, i);
        emit('${');
        i += 2;
        code(true);
        if (i < text.length) emit('}');
        start = ++i;
      } else i++;
    }
    inside(start, Math.min(i, text.length));
    if (i < text.length) {
      i++;
      emit('`');
    }
  };
  /** Scans code; inside a template's `${`, returns at its closing brace (not consumed). */
  function code(nested: boolean): void {
    let depth = 0;
    while (i < text.length) {
      const c = text[i] ?? '';
      const next = text[i + 1];
      if (c === '/' && next === '/') {
        const end = text.indexOf('\n', i);
        const stop = end === -1 ? text.length : end;
        blank(i, stop);
        i = stop;
      } else if (c === '/' && next === '*') {
        const end = text.indexOf('*/', i + 2);
        const stop = end === -1 ? text.length : end + 2;
        blank(i, stop);
        i = stop;
      } else if (c === "'" || c === '"') quoted(c);
      else if (c === '`') template();
      else if (c === '/' && REGEX_MAY_FOLLOW.test(tail)) regex();
      else {
        if (c === '{') depth++;
        if (c === '}') {
          if (depth === 0 && nested) return;
          depth--;
        }
        emit(c);
        i++;
      }
    }
  }
  code(false);
  return out.join('');
}

/** The 1-based line of an offset. */
const lineAt = (text: string, index: number): number => text.slice(0, index).split('\n').length;

/**
 * The condition of every `if (...)` in code from codeOf, with the offset of the `if`; the
 * condition's text is read from `shown` (the same code with its literals kept, say).
 */
function ifConditions(code: string, shown = code): Array<{ index: number; condition: string }> {
  return [...code.matchAll(/\bif\s*\(/g)].map((m) => {
    const start = m.index + m[0].length;
    let depth = 1;
    let j = start;
    for (; j < code.length && depth > 0; j++) {
      if (code[j] === '(') depth++;
      else if (code[j] === ')') depth--;
    }
    return { index: m.index, condition: shown.slice(start, j - 1).trim() };
  });
}

/**
 * The condition of every `cond ? a : b` in code from codeOf, with the offset of the `?`: the
 * text before the `?` back to what opens the expression (an unmatched bracket, a comma, a
 * semicolon, a brace, a colon, another `?`, an assignment or an arrow). Optional chaining,
 * `??`, `??=` and optional members (`a?: T`, `a?)`) are not ternaries. The condition's text
 * is read from `shown`, as for ifConditions.
 */
function ternaryConditions(code: string, shown = code): Array<{ index: number; condition: string }> {
  const found: Array<{ index: number; condition: string }> = [];
  for (let k = code.indexOf('?'); k !== -1; k = code.indexOf('?', k + 1)) {
    const next = code[k + 1] ?? '';
    if (next === '?' || code[k - 1] === '?' || (next === '.' && !/\d/.test(code[k + 2] ?? ''))) continue;
    if (/^\s*[:),=;]/.test(code.slice(k + 1, k + 40))) continue;
    let depth = 0;
    let j = k - 1;
    for (; j >= 0; j--) {
      const c = code[j] ?? '';
      if (c === ')' || c === ']') depth++;
      else if (c === '(' || c === '[') {
        if (depth === 0) break;
        depth--;
      } else if (depth === 0) {
        if (',;?:{}'.includes(c)) break;
        if (c === '=' && code[j + 1] === '>') {
          j++; // an arrow: its body starts after the `>`
          break;
        }
        const comparison = code[j + 1] === '=' || '=!<>'.includes(code[j - 1] ?? '');
        if (c === '=' && !comparison) break;
      }
    }
    const condition = shown.slice(j + 1, k).trim().replace(/^(?:return|throw|case|yield|else)\s+/, '');
    found.push({ index: k, condition });
  }
  return found;
}

const ASSIGNMENT_OPERATOR = String.raw`(?:\*\*|>>>|<<|>>|&&|\|\||\?\?|[-+*/%&|^])?=(?![=>])`;
/**
 * `<expr>.<name> <op>=` in code from codeOf, `<expr>` a name or a parenthesised expression (a
 * cast) followed by member accesses, indexes, calls and non-null assertions; not after a type
 * annotation's colon on the same line (`let t: NodeJS.Timeout = ...`).
 */
const MEMBER_ASSIGNMENT = new RegExp(
  String.raw`(?<![\w$#.\])]|:[ \t]*(?:typeof\s+)?)((?:[A-Za-z_$][\w$]*|\([^()\n]*\))(?:\s*(?:\?\.|!?\.)\s*#?[\w$]+|!|\[[^\]\n]*\]|\([^()\n]*\))*)\s*!?\.\s*(#?[\w$]+)\s*(${ASSIGNMENT_OPERATOR})`,
  'g',
);

interface MemberAssignment {
  file: string;
  line: number;
  /** The object written to, as written with spaces only inside: `store.leases` in `store.leases.fence = f`. */
  object: string;
  field: string;
  operator: string;
  /** The line of source, trimmed. */
  source: string;
}

function memberAssignments(file: SourceFile): MemberAssignment[] {
  const code = codeOf(file.text);
  const lines = file.text.split('\n');
  return [...code.matchAll(MEMBER_ASSIGNMENT)].map((m) => {
    const line = lineAt(code, m.index);
    return {
      file: file.path,
      line,
      object: (m[1] ?? '').replace(/\s+/g, ' ').replace(/ ?([.!?[\]()]) ?/g, '$1'),
      field: m[2] ?? '',
      operator: m[3] ?? '',
      source: (lines[line - 1] ?? '').trim(),
    };
  });
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
const RUNTIME = ['agents', 'budgets', 'children', 'cluster', 'driver', 'observation', 'sessions', 'steps', 'tools', 'topology'] as const;
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
      "} from '../agents/e.js';",
      "// import { g } from '../routes/g.js';",
      "/* import { h } from 'node:http'; */",
    ].join('\n');
    expect(importSpecifiers(sample).sort()).toEqual(['../agents/e.js', '../b.js', './a.js', './c.js', 'fastify', 'node:fs', 'pino']);
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
  const runtime = runtimeFiles();
  const contract = sourceFiles('contract');
  const plugins = sourceFiles('plugins');

  it('the layers being checked contain the files we expect', () => {
    expect(domain.map((f) => f.path)).toContain('src/domain/turn-machine.ts');
    expect(runtime.map((f) => f.path)).toContain('src/agents/live-agent.ts');
    expect(importsOf(domain).map((i) => i.target)).toContain('src/domain/errors.js');
    expect(importsOf(runtime).some((i) => underLayer('domain')(i.target))).toBe(true);
  });

  it('the domain imports nothing from the runtime, the adapters, the composition or the routes, nor fastify, pino or any node module', () => {
    expect(importsOf(domain).filter((i) => isForbiddenInDomain(i.target)).map(describeImport)).toEqual([]);
  });

  it('nothing in the runtime or the domain imports a route', () => {
    expect(
      importsOf([...runtime, ...domain])
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
      importsOf([...runtime, ...domain, ...contract, ...sourceFiles('routes')])
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

describe('code scanning', () => {
  it('blanks comments, strings, templates and regular expressions but keeps code, template expressions and lines', () => {
    const sample = [
      "const a = 'x.y = 1'; // b.c = 2",
      '/* d.e = 3',
      '   */ const f = `g.h = ${i.j} k`;',
      "const l = /m.n = ['\"]/g.test(o) ? p / q : r;",
    ].join('\n');
    const code = codeOf(sample);
    expect(code.length).toBe(sample.length);
    expect(code.split('\n')).toHaveLength(4);
    expect(code).not.toMatch(/x\.y|b\.c|d\.e|g\.h|m\.n/);
    expect(code).toMatch(/\$\{i\.j\}/);
    expect(code).toMatch(/p \/ q/);
    expect(code).toMatch(/test\(o\)/);
  });

  it('finds if and ternary conditions, not optional chaining, ?? or optional members', () => {
    const text = [
        'if (topology.kind === "cluster") go();',
        'const x = peering?.poolState() ?? fallback;',
        'function f(a?: number, b?) { return a === undefined ? clusterCaller(r) : b; }',
        'interface I { c?: string }',
        'const y = list(parentId === undefined ? filter : { ...filter }, clusterCaller(request));',
        'const z = `${isCluster ? "a" : "b"}`;',
        'v ??= w;',
        'const g = (e) => e.ok ? 1 : 2;',
        "const h = '?' + (mode === 'x?' ? 1 : 2);",
      ].join('\n');
    const code = codeOf(text);
    const shown = codeOf(text, true);
    expect(shown).toBe(text);
    expect(ifConditions(code).map((c) => c.condition)).toEqual(['topology.kind === "       "']);
    expect(ifConditions(code, shown).map((c) => c.condition)).toEqual(['topology.kind === "cluster"']);
    expect(ternaryConditions(code, shown).map((c) => c.condition)).toEqual(['a === undefined', 'parentId === undefined', 'isCluster', 'e.ok', "mode === 'x?'"]);
  });

  it('finds member assignments with any operator, not comparisons, arrows, type annotations or this', () => {
    const file = {
      path: 'src/x.ts',
      text: [
        'store.leases.fence = fence;',
        'dispatcher.onParked = () => undefined;',
        'this.options.url ??= url;',
        'this.count += 1;',
        'if (a.b === c.d || a.b == 1 || a.b != 2 || a.b >= 3) x => x.y;',
        'let t: NodeJS.Timeout = start();',
        'rows[0]!.seq -= 1;',
        "// old.way = 'gone'",
        '(ownership as unknown as Ownership).options.url = url;',
        'registry.get(id).onParked = park;',
      ].join('\n'),
    };
    expect(memberAssignments(file).map((a) => `${a.line}: ${a.object}.${a.field} ${a.operator}`)).toEqual([
      '1: store.leases.fence =',
      '2: dispatcher.onParked =',
      '3: this.options.url ??=',
      '4: this.count +=',
      '7: rows[0]!.seq -=',
      '9: (ownership as unknown as Ownership).options.url =',
      '10: registry.get(id).onParked =',
    ]);
  });
});

describe('layout', () => {
  const all = sourceFiles('');
  const lineCount = (text: string): number => text.split('\n').length - (text.endsWith('\n') ? 1 : 0);

  it('no folder directly under src/ holds more than 40 % of the TypeScript lines under src/', () => {
    const total = all.reduce((sum, f) => sum + lineCount(f.text), 0);
    const folders = readdirSync(SRC, { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name)
      .sort();
    const shares = folders.map((folder) => {
      const lines = all.filter((f) => f.path.startsWith(`src/${folder}/`)).reduce((sum, f) => sum + lineCount(f.text), 0);
      return { folder, lines, share: lines / total };
    });
    expect(total).toBeGreaterThan(0);
    const table = shares.map((s) => `src/${s.folder}/ ${(100 * s.share).toFixed(1)} % (${s.lines} of ${total} lines)`).join('; ');
    expect(
      shares.filter((s) => s.share > 0.4).map((s) => `src/${s.folder}/ holds ${(100 * s.share).toFixed(1)} % of the lines`),
      `shares: ${table}`,
    ).toEqual([]);
  });

  it('no folder under src/ but src/domain/ has more than 12 TypeScript files loose at its own top level', () => {
    const loose = new Map<string, number>();
    for (const file of all) loose.set(dirname(file.path), (loose.get(dirname(file.path)) ?? 0) + 1);
    expect(loose.get('src/steps')).toBeGreaterThan(0);
    expect(
      [...loose]
        .filter(([folder, count]) => folder !== 'src/domain' && count > 12)
        .map(([folder, count]) => `${folder}/ has ${count} loose .ts files (at most 12)`),
    ).toEqual([]);
  });
});

describe('test isolation', () => {
  it('runs every test file that replaces a module in a registry of its own (vitest.config.ts ISOLATED_TEST_FILES), and only those', async () => {
    const { ISOLATED_TEST_FILES } = await import('../vitest.config.js');
    const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
    const testFiles = (dir: string): string[] =>
      readdirSync(join(root, dir), { withFileTypes: true }).flatMap((entry) =>
        entry.isDirectory() ? testFiles(join(dir, entry.name)) : entry.name.endsWith('.test.ts') ? [join(dir, entry.name).split(sep).join('/')] : [],
      );
    const mocking = testFiles('test').filter((file) => /\bvi\.(mock|doMock|stubGlobal|stubEnv)\(/.test(readFileSync(join(root, file), 'utf8')));
    expect(mocking.length).toBeGreaterThan(0);
    expect([...ISOLATED_TEST_FILES].sort()).toEqual(mocking.sort());
  });
});

describe('adapters and composition', () => {
  const all = sourceFiles('');
  const adapters = sourceFiles('adapters');
  const outside = (...layers: string[]) => all.filter((f) => !layers.some((layer) => underLayer(layer)(f.path)));

  it('nothing outside src/adapters/ and src/composition/ imports an adapter', () => {
    expect(adapters.map((f) => f.path)).toContain('src/adapters/postgres/postgres-store.ts');
    expect(importsOf(sourceFiles('composition')).some((i) => underLayer('adapters')(i.target))).toBe(true);
    expect(
      importsOf(outside('adapters', 'composition'))
        .filter((i) => underLayer('adapters')(i.target))
        .map(describeImport),
    ).toEqual([]);
  });

  it('an adapter imports only the ports (sessions, cluster-database), the domain, the contract, its own folder, the shared adapter helpers and packages', () => {
    const isPort = (target: string): boolean =>
      ['domain', 'sessions', 'contract'].some((layer) => underLayer(layer)(target)) || target === 'src/cluster/cluster-database.js';
    // Its own adapter folder, or a shared helper at the top of src/adapters/ (which itself
    // imports only other shared helpers): a PostgreSQL file does not reach into the SQLite one.
    const isOwnOrShared = (file: string, target: string): boolean =>
      underLayer('adapters')(target) && (dirname(target) === 'src/adapters' || dirname(target) === dirname(file));
    const imports = importsOf(adapters);
    expect(imports.some((i) => i.target === 'src/cluster/cluster-database.js')).toBe(true);
    expect(
      imports
        .filter((i) => i.specifier.startsWith('.') && !isPort(i.target) && !isOwnOrShared(i.file, i.target))
        .map(describeImport),
    ).toEqual([]);
  });

  it('nothing outside src/composition/ and src/adapters/ casts to or tests for a concrete store', () => {
    const stores = '(?:Memory|Sqlite|Postgres)SessionStore';
    const patterns = [
      new RegExp(String.raw`\bas\s+${stores}\b`, 'g'),
      new RegExp(String.raw`(?<![\w$.>\]]\s*)<\s*${stores}\s*>`, 'g'),
      new RegExp(String.raw`\binstanceof\s+${stores}\b`, 'g'),
    ];
    expect(patterns.every((p) => codeOf('x as PostgresSessionStore; <MemorySessionStore>y; z instanceof SqliteSessionStore').match(p))).toBe(true);
    expect(patterns.some((p) => codeOf('Promise<PostgresSessionStore>; // as MemorySessionStore').match(p))).toBe(false);
    expect(
      outside('composition', 'adapters').flatMap((file) => {
        const code = codeOf(file.text);
        return patterns.flatMap((p) => [...code.matchAll(p)].map((m) => `${file.path}:${lineAt(code, m.index)}: ${m[0]}`));
      }),
    ).toEqual([]);
  });
});

describe('routes', () => {
  const routes = sourceFiles('routes');

  it('routes never branch on the topology: no cluster or peering in an if or ternary condition, no import from src/cluster/ but peers.ts', () => {
    expect(routes.map((f) => f.path)).toContain('src/routes/cluster/index.ts');
    const branches = routes.flatMap((file) => {
      // Structure from the code with its literals blanked, the condition as written (a
      // `kind === 'cluster'` is a branch on the topology too), comments left out of both.
      const code = codeOf(file.text);
      const shown = codeOf(file.text, true);
      return [...ifConditions(code, shown), ...ternaryConditions(code, shown)]
        .filter((c) => /cluster|peering/i.test(c.condition))
        .map((c) => `${file.path}:${lineAt(code, c.index)} branches on '${c.condition}'`);
    });
    const clusterImports = importsOf(routes)
      .filter((i) => underLayer('cluster')(i.target) && i.target !== 'src/cluster/peers.js')
      .map(describeImport);
    expect([...branches, ...clusterImports]).toEqual([]);
  });
});

describe('construction', () => {
  /**
   * Writes to an object that is its writer's own state or value under construction, not a
   * collaborator's: each names the file, the objects written to (as the code spells them), the
   * fields when the object is a framework's, and why it is allowed. A new entry needs the same
   * kind of reason; "it is a service I was given" never is one.
   */
  const OWN_STATE: ReadonlyArray<{ file: string; objects: readonly string[]; fields?: readonly string[]; reason: string }> = [
    { file: 'src/adapters/batch-rows.ts', objects: ['range'], reason: 'an entry of the Map `advance` this function builds and returns' },
    { file: 'src/adapters/sqlite/sqlite-writes.ts', objects: ['chunk'], reason: 'an entry of the Map `chunks` this function builds' },
    { file: 'src/adapters/memory/memory-webhooks.ts', objects: ['row'], reason: 'the memory store applying a change to its own delivery rows (its private `byKey`)' },
    { file: 'src/domain/store-settings.ts', objects: ['parsed'], reason: 'a URL parsed here to redact it; a URL is changed through its setters' },
    { file: 'src/driver/chat-completions.ts', objects: ['base'], reason: 'a URL parsed here to build the endpoint; a URL is changed through its setters' },
    { file: 'src/agents/live-agent.ts', objects: ['input'], reason: 'a const this function built from one of two literals (a ternary the literal rule does not read)' },
    { file: 'src/agents/reads/receipts.ts', objects: ['receipt.timestamps'], reason: 'the `timestamps: {}` literal of the receipt this function builds' },
    { file: 'src/budgets/forest-ledger.ts', objects: ['account'], reason: "an Account of the ledger's own accounts map, replaying a budget or grants entry into it (`budget` and `grants` are Account's public fields)" },
    { file: 'src/tools/backend/tool-pool.ts', objects: ['entry'], reason: "the pool's own offered-call records (a type private to the file, kept in its private map)" },
    { file: 'src/approvals/approvals.ts', objects: ['w'], reason: "the approvals' own waiting records (a type private to the file, kept in its private map): the timer that expires one" },
    { file: 'src/children/activations.ts', objects: ['entry'], reason: "the registry's own ActivationEntry (a class private to the file) memoizing its disposal" },
    { file: 'src/children/setup-registry.ts', objects: ['registration', 'installation', 'installation.batch'], reason: "the registry's own records (types private to the file)" },
    { file: 'src/domain/budget.ts', objects: ['into'], reason: 'addUsage: the documented in-place sum into a Usage value' },
    { file: 'src/observation/tracing/forest-spans.ts', objects: ['spans'], reason: "the tracer's own per-agent span records (its private `agents` map)" },
    { file: 'src/plugins/connection-cap.ts', objects: ['app.server'], fields: ['maxConnections'], reason: "Node's http.Server takes its connection cap as this property; it has no setter" },
    { file: 'src/plugins/json-bodies.ts', objects: ['request'], fields: ['body'], reason: "Fastify's way for a hook to give a request its body" },
    { file: 'src/tenants/quotas.ts', objects: ['live'], reason: "the quotas' own per-tenant live counts (records of its private map)" },
    { file: 'src/tenants/usage-windows.ts', objects: ['counts', 'sum', 'sum.spent'], reason: "the windows' own per-tenant counts (records of its private maps, or the sums it is building)" },
    { file: 'src/routes/auth.ts', objects: ['request'], fields: ['principal', 'keyRevoked'], reason: "Fastify's way for a hook to give a request its principal (a request decoration)" },
    { file: 'src/plugins/errors.ts', objects: ['body'], reason: 'the error body this function got fresh from errorBody() and sends' },
    { file: 'src/routes/errors.ts', objects: ['body'], reason: 'the error body this function got fresh from errorBody() and sends' },
    { file: 'src/plugins/openapi.ts', objects: ['body', 'components'], reason: 'an in-place transform of the generated OpenAPI document (plain JSON)' },
    { file: 'src/sessions/session-log.ts', objects: ['known', 'session', 'forest', 'this.pending'], reason: "the log's own per-forest and per-session records (its private maps) and its pending batch" },
    { file: 'src/steps/step-cache.ts', objects: ['renders', 'conversation'], reason: "the cache's own per-agent records (its private map) and a Conversation (a class private to the file) it has just made" },
    { file: 'src/steps/step-protocol.ts', objects: ['result'], reason: "runCalls fills the OutputResult literal its caller in the same class built and passed in (a private method's out-parameter)" },
    { file: 'src/tools/tool-calls.ts', objects: ['view'], reason: 'the fresh result this function got from its own run or invoke and returns' },
  ];
  const allowance = (a: MemberAssignment) =>
    OWN_STATE.find((e) => e.file === a.file && e.objects.includes(a.object) && (e.fields === undefined || e.fields.includes(a.field)));

  const texts = new Map(sourceFiles('').map((f) => [f.path, codeOf(f.text)]));
  /**
   * The assignment writes to a `const` declared from an object or array literal in a block that
   * encloses it (`const out: View = { ... }; if (x) out.x = x;`): the function is building its
   * own value, not setting a collaborator's field. Only a bare name qualifies, never a chain.
   */
  function builtFromLiteral(a: MemberAssignment): boolean {
    if (!/^[A-Za-z_$][\w$]*$/.test(a.object)) return false;
    const code = texts.get(a.file) ?? '';
    const at = code.split('\n').slice(0, a.line - 1).join('\n').length;
    const name = a.object.replace(/\$/g, '\\$');
    const declaration = new RegExp(String.raw`\bconst\s+${name}(?:\s*:[^=;]+)?\s*=\s*[{[]`, 'g');
    return [...code.slice(0, at).matchAll(declaration)].some((d) => encloses(code, d.index, at));
  }

  /** No brace closes, between `from` and `to`, the block `from` is in. */
  function encloses(code: string, from: number, to: number): boolean {
    let depth = 0;
    for (let i = from; i < to; i++) {
      if (code[i] === '{') depth++;
      else if (code[i] === '}' && --depth < 0) return false;
    }
    return true;
  }

  const hits = sourceFiles('')
    .flatMap(memberAssignments)
    .filter((a) => a.object !== 'this');

  it('the literal rule sees a const built in an enclosing block, not one of another function', () => {
    const file = {
      path: 'src/sample.ts',
      text: [
        'function a() {',
        '  const out: View = { id };',
        '  if (x) { out.label = x; }',
        '}',
        'function b(out: View) {',
        '  out.label = y;',
        '  const store = open();',
        '  store.fence = f;',
        '}',
      ].join('\n'),
    };
    texts.set(file.path, codeOf(file.text));
    expect(memberAssignments(file).map((a) => `${a.line} ${builtFromLiteral(a)}`)).toEqual(['3 true', '6 false', '8 false']);
    texts.delete(file.path);
  });

  it('no object assigns a field of another object after its construction', () => {
    expect(hits.length).toBeGreaterThan(0);
    expect(
      hits
        .filter((a) => !builtFromLiteral(a) && allowance(a) === undefined)
        .map((a) => `${a.file}:${a.line}: ${a.source}`),
    ).toEqual([]);
  });

  it('every allowance for writing an object of its own is still used', () => {
    const used = new Set(hits.map(allowance));
    expect(
      OWN_STATE.filter((e) => !used.has(e)).map((e) => `${e.file}: ${e.objects.join(', ')} is allowed but no longer written to`),
    ).toEqual([]);
  });
});
