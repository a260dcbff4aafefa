/**
 * `npm run demo` keeps working: the demo runs against the service's sources and its scripted
 * model, and every check it prints passes (the exit code says so too).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);

describe('npm run demo', () => {
  it('drives a whole forest with the built-in driver and passes its own checks', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, DEMO_FROM_SOURCE: '1' };
    delete env.DEMO_MODEL_URL;
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'demo/run.ts'], { env, timeout: 60_000 });
    expect(stdout).toContain('root coordinator  [idle]');
    expect(stdout).toMatch(/child researcher \(\S+\) {2}\[settled\]/);
    expect(stdout).toMatch(/child budget \(\S+\) {2}\[settled\]/);
    expect(stdout).toContain('(activation resumed)');
    const checks = stdout.slice(stdout.indexOf('checks:'));
    expect(checks.match(/^ {2}ok /gm)).toHaveLength(6);
    expect(checks).not.toContain('FAIL');
  }, 60_000);
});
