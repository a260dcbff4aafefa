/**
 * What a heap snapshot holds, by kind of object: for objects their constructor's name, for
 * closures their function's name, for strings, arrays and V8's own kinds the kind. Two
 * summaries compared show what grew between the snapshots (the soak's `--snapshots`).
 *
 *   npx tsx bench/heap-summary.ts before.heapsnapshot after.heapsnapshot
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface HeapClass {
  count: number;
  bytes: number;
}

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

/** Objects and their shallow sizes by kind, from a .heapsnapshot file. */
export function summarizeHeap(path: string): Map<string, HeapClass> {
  const snapshot = JSON.parse(readFileSync(path, 'utf8')) as Snapshot;
  const fields = snapshot.snapshot.meta.node_fields;
  const types = snapshot.snapshot.meta.node_types[0];
  const [typeAt, nameAt, sizeAt] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [number, number, number];
  const width = fields.length;
  const classes = new Map<string, HeapClass>();
  for (let i = 0; i < snapshot.nodes.length; i += width) {
    const type = types[snapshot.nodes[i + typeAt]!] ?? 'unknown';
    const name = snapshot.strings[snapshot.nodes[i + nameAt]!] ?? '';
    const key = type === 'object' || type === 'native' ? name : type === 'closure' ? `(closure) ${name || '(anonymous)'}` : type === 'array' ? `(array) ${name}` : `(${type})`;
    const entry = classes.get(key) ?? { count: 0, bytes: 0 };
    entry.count += 1;
    entry.bytes += snapshot.nodes[i + sizeAt]!;
    classes.set(key, entry);
  }
  return classes;
}

/** The kinds that grew most from `before` to `after`, by bytes, with their counts. */
export function heapGrowth(before: Map<string, HeapClass>, after: Map<string, HeapClass>, top = 25): { kind: string; count: number; countDelta: number; bytes: number; bytesDelta: number }[] {
  const kinds = new Set([...before.keys(), ...after.keys()]);
  return [...kinds]
    .map((kind) => {
      const a = before.get(kind) ?? { count: 0, bytes: 0 };
      const b = after.get(kind) ?? { count: 0, bytes: 0 };
      return { kind: kind.slice(0, 80), count: b.count, countDelta: b.count - a.count, bytes: b.bytes, bytesDelta: b.bytes - a.bytes };
    })
    .sort((x, y) => y.bytesDelta - x.bytesDelta || y.countDelta - x.countDelta)
    .slice(0, top);
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (process.argv.length !== 4) throw new Error('usage: npx tsx bench/heap-summary.ts before.heapsnapshot after.heapsnapshot');
  console.table(heapGrowth(summarizeHeap(process.argv[2]!), summarizeHeap(process.argv[3]!), 40));
}
