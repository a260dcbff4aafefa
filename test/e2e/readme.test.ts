/**
 * The README's walk-through, run as written (bash + curl) against a real server on
 * 127.0.0.1, so the documentation cannot drift from the service. A machine without curl (a
 * fresh one has Node and npm only) runs it with fixtures/bin/curl, a stand-in that sends the
 * same requests and refuses any flag it does not implement.
 */
import { execFile, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { delimiter } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHarness, type Harness } from '../fixtures/harness.js';

const run = promisify(execFile);

/** PATH for the walk-through: the machine's curl if it has one, else the stand-in. */
function pathWithCurl(): string {
  const path = process.env.PATH ?? '';
  try {
    execFileSync('bash', ['-c', 'command -v curl'], { stdio: 'ignore' });
    return path;
  } catch {
    return `${fileURLToPath(new URL('../fixtures/bin', import.meta.url))}${delimiter}${path}`;
  }
}

function walkThrough(): string {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const section = readme.split('## Walk-through')[1] ?? '';
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  if (block === undefined) throw new Error('README has no sh block under "## Walk-through"');
  return block;
}

describe('README walk-through', () => {
  let harness: Harness;
  let url: string;

  beforeAll(async () => {
    harness = await startHarness();
    url = await harness.app.listen({ host: '127.0.0.1', port: 0 });
  });

  afterAll(async () => {
    await harness.close();
  });

  it('creates a root, sends a followup, claims the step, posts an output and reads the session, as written', async () => {
    const script = walkThrough();
    expect(script).toContain('B=http://127.0.0.1:3000');
    const { stdout } = await run('bash', ['-euo', 'pipefail', '-c', script.replace('B=http://127.0.0.1:3000', `B=${url}`)], {
      env: { ...process.env, PATH: pathWithCurl() },
      timeout: 20_000,
    });
    const lines = stdout.trim().split('\n');
    const page = JSON.parse(lines[lines.length - 1] ?? '') as { entries: { type: string; role?: string; content?: { text: string }[] }[] };
    expect(page.entries.map((e) => (e.type === 'message' ? `${e.role}:${e.content?.[0]?.text}` : e.type))).toEqual([
      'turn-start',
      'user:Say hello.',
      'step-start',
      'assistant:Hello!',
      'turn-end',
    ]);
    expect(lines).toHaveLength(5);
    expect(JSON.parse(lines[0] ?? '')).toMatchObject({ agent: { kind: 'root', status: 'idle' }, agentToken: expect.any(String) });
    expect(JSON.parse(lines[1] ?? '')).toMatchObject({ messageId: expect.any(String), inboxItemId: expect.any(String) });
    expect(JSON.parse(lines[2] ?? '')).toMatchObject({ step: { index: 0, messages: [{ role: 'system' }, { role: 'user', content: 'Say hello.' }] } });
    expect(JSON.parse(lines[3] ?? '')).toEqual({ toolResults: [], awaiting: [], turn: 'ended' });
  });
});
