/**
 * `npm run demo` keeps working: the demo runs against the service's sources and its scripted
 * model, shows a settled child compacted and then resumed from the summary, an interrupt of a
 * child and what it did, and every check it prints passes (the exit code says so too).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);

describe('npm run demo', () => {
  it('drives a whole forest with the built-in driver, compacts a settled child that then resumes from the summary, interrupts a child whose queued task then waits for the next message, and passes its own checks', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, DEMO_FROM_SOURCE: '1' };
    delete env.DEMO_MODEL_URL;
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'demo/run.ts'], { env, timeout: 60_000 });
    expect(stdout).toContain('root coordinator  [idle]');
    expect(stdout).toMatch(/child researcher \(\S+\) {2}\[settled\]/);
    expect(stdout).toMatch(/child budget \(\S+\) {2}\[settled\]/);
    expect(stdout).toContain('(activation resumed)');
    const compacted = /researcher \[settled\]: POST \/v1\/agents\/(\S+)\/compactions \{"summary": "(.+)"\}\n {3}→ 201 (.+)$/m.exec(stdout);
    const summary = compacted?.[2];
    expect(JSON.parse(compacted?.[3] ?? 'null')).toMatchObject({ type: 'compaction', seq: expect.any(Number), throughSeq: expect.any(Number) });
    expect(stdout).toContain(`the researcher's next model request: [user ${JSON.stringify(summary)}, user "Which of those sights are free?"]`);
    const researcher = stdout.slice(stdout.indexOf(`child researcher (${compacted?.[1]})  [settled]`));
    expect(researcher).toMatch(/\(activation settled\)\n.*── compaction through seq \d+; later requests start from: ".+" ──\n.*\(activation resumed\)/);
    const translator = /POST \/v1\/agents\/(\S+)\/interrupt \{\} → 202 (.+)$/m.exec(stdout);
    expect(JSON.parse(translator?.[2] ?? 'null')).toEqual({ interrupted: [translator?.[1]] });
    expect(stdout).toContain('the held model request was aborted: its connection closed unanswered');
    expect(stdout).toContain('translator [running]: turn-end cancelled; queued tasks 1, and 0.3 s later still 1 turn started');
    const child = stdout.slice(stdout.indexOf(`child translator (${translator?.[1]})  [settled]`));
    expect(child.match(/── turn (\w+) ──/g)).toEqual(['── turn cancelled ──', '── turn completed ──', '── turn completed ──']);
    const checks = stdout.slice(stdout.indexOf('checks:'));
    expect(checks.match(/^ {2}ok /gm)).toHaveLength(11);
    expect(checks).not.toContain('FAIL');
  }, 60_000);
});
