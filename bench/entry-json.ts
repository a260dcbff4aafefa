/**
 * The entry writer (src/services/stores/entry-json.ts) against `JSON.stringify`, in the same
 * process: a report's three message entries, as the session log makes them, written as the
 * SQLite store writes them (each without its `seq`, a commit's texts joined into its chunk
 * text). The two ways alternate round by round, so the machine's noise falls on both alike;
 * the figure is the median per report, and the ratio of the writer's to `JSON.stringify`'s.
 *
 * The memory store writes with `JSON.stringify`: its arena would have to flatten the writer's
 * text (a tree of its pieces until then), and at 8dc4b38 this bench timed that way at
 * 1.004-1.064 of `JSON.stringify`'s.
 *
 *   npx tsx bench/entry-json.ts [--rounds 300]
 */
import { messageEntry, type SessionEntry } from '../src/domain/session.js';
import { entryBodyJson } from '../src/services/stores/entry-json.js';

const i = process.argv.indexOf('--rounds');
const rounds = i === -1 ? 300 : Number(process.argv[i + 1]);
const REPORTS = 500;

let n = 0;
const id = (prefix: string): string => `${prefix}_01a22fdb-3a65-7000-${(1000 + (n % 9000)).toString(16)}-${String(274111000000 + n++).padStart(12, '0')}`;

/** A report's three entries: the call and its result in the child's session, the report in the parent's. */
function report(seq: number): SessionEntry[] {
  const at = `2026-12-01T04:27:06.${String(n % 1000).padStart(3, '0')}Z`;
  const child = 'agt_01a22fdb-3a3a-7000-9de9-8d205446bb2e';
  const output = 'a finding worth reporting to the parent';
  const callId = id('msg');
  const reportId = id('msg');
  const bodies = [
    messageEntry({ id: id('msg'), role: 'assistant', content: [], source: { kind: 'model' }, toolCalls: [{ id: callId, name: 'report', input: { output } }] }, at),
    messageEntry({ id: id('msg'), role: 'tool', content: [{ type: 'text', text: `report accepted by the agent that started you as message ${reportId}` }], source: { kind: 'tool' }, toolCallId: callId }, at),
    messageEntry({ id: reportId, role: 'user', content: [{ type: 'text', text: `Background subagent ${child} reported:` }, { type: 'text', text: output }], source: { kind: 'subagent-report', senderSessionId: child } }, at),
  ];
  return bodies.map((body, k) => ({ seq: seq + k, ...body }) as SessionEntry);
}

function withoutSeq(entry: SessionEntry): string {
  const { seq: _seq, ...body } = entry;
  return JSON.stringify(body);
}

const ways = {
  'SQLite chunk, JSON.stringify': (entries: SessionEntry[]): number => {
    let length = 0;
    for (let at = 0; at < entries.length; at += 75) length += `[${entries.slice(at, at + 75).map(withoutSeq).join(',')}]`.length;
    return length;
  },
  'SQLite chunk, entry writer': (entries: SessionEntry[]): number => {
    let length = 0;
    for (let at = 0; at < entries.length; at += 75) length += `[${entries.slice(at, at + 75).map(entryBodyJson).join(',')}]`.length;
    return length;
  },
};

const samples = new Map<string, number[]>(Object.keys(ways).map((k) => [k, []]));
for (let round = 0; round < rounds; round++) {
  for (const [name, write] of Object.entries(ways)) {
    const entries = Array.from({ length: REPORTS }, (_, r) => report(3 * r + 1)).flat();
    const started = process.hrtime.bigint();
    if (write(entries) === 0) throw new Error(`${name} wrote nothing`);
    // The first tenth warms up.
    if (round >= rounds / 10) samples.get(name)!.push(Number(process.hrtime.bigint() - started) / REPORTS / 1000);
  }
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const rows: Record<string, { 'µs per report (median)': number; 'ratio to JSON.stringify': number | string }> = {};
const base = median(samples.get('SQLite chunk, JSON.stringify')!);
const writer = median(samples.get('SQLite chunk, entry writer')!);
rows['SQLite chunk, JSON.stringify'] = { 'µs per report (median)': +base.toFixed(2), 'ratio to JSON.stringify': '' };
rows['SQLite chunk, entry writer'] = { 'µs per report (median)': +writer.toFixed(2), 'ratio to JSON.stringify': +(writer / base).toFixed(3) };
console.log(`a report's three entries, ${REPORTS} reports a round, ${rounds} rounds alternating`);
console.table(rows);
