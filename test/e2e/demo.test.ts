/**
 * `npm run demo` keeps working: the demo runs against the service's sources and its scripted
 * model, registers its own MCP server, whose tool a child calls (the server sees the effect key
 * of the child's session) and reports what it said to its parent, shows a settled child
 * compacted and then resumed from the summary, an interrupt of a
 * child and what it did, an approval rule holding a child's two calls of the MCP tool in the
 * inbox until the operator approves one (it runs) and denies the other (the child reads the
 * reason), a steps budget stopping a second forest until the operator raises it,
 * and every check it prints passes (the exit code says so too).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);

describe('npm run demo', () => {
  it('drives a whole forest with the built-in driver, has a child call the demo\'s MCP tool and report its answer with the effect key the server saw matching its session\'s, compacts a settled child that then resumes from the summary, interrupts a child whose queued task then waits for the next message, holds two tool calls of a child for a person who approves one and denies the other, stops a forest at its steps budget until the operator raises it, and passes its own checks', async () => {
    // The overload guard off, as for every spawned test server: this test is not about it.
    const env: NodeJS.ProcessEnv = { ...process.env, DEMO_FROM_SOURCE: '1', AGENTFOREST_MAX_EVENT_LOOP_DELAY_MS: '0' };
    delete env.DEMO_MODEL_URL;
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'demo/run.ts'], { env, timeout: 60_000 });
    expect(stdout).toContain('root coordinator  [idle]');
    expect(stdout).toMatch(/child researcher \(\S+\) {2}\[settled\]/);
    expect(stdout).toMatch(/child budget \(\S+\) {2}\[settled\]/);
    expect(stdout).toContain('(activation resumed)');
    expect(stdout).toMatch(/^ {3}PUT \/v1\/tool-servers\/prices \{"url":"http:\/\/127\.0\.0\.1:\d+\/mcp"\} → 200 prices \[ready\]\n {3}its tools: trip_cost \(/m);
    const grants = /^ {3}GET \/v1\/agents\/coordinator\/grants → 200 (.+)$/m.exec(stdout);
    expect(JSON.parse(grants?.[1] ?? 'null')).toMatchObject({ grants: expect.arrayContaining(['mcp__prices__*']), effective: expect.arrayContaining(['mcp__prices__trip_cost']) });
    const mcpCall = /^ {3}budget subagent → mcp__prices__trip_cost \{"city":"Lisbon","nights":2\}; effect key in its session (\S+)$/m.exec(stdout);
    const seen = /^ {3}prices server got trip_cost \{"city":"Lisbon","nights":2\}; effect key in _meta (\S+), Idempotency-Key (\S+)\n {6}both the session's key; it answered (".+")$/m.exec(stdout);
    expect(mcpCall?.[1]).toMatch(/^ek_/);
    expect([seen?.[1], seen?.[2]]).toEqual([mcpCall?.[1], mcpCall?.[1]]);
    const answer = JSON.parse(seen?.[3] ?? 'null') as string;
    expect(answer).toMatch(/^Lisbon, 2 nights: .+ EUR in all\.$/);
    expect(stdout).toContain(`budget subagent read the result ${JSON.stringify(answer)}`);
    const report = JSON.parse(/^ {3}coordinator's session: report (".+")$/m.exec(stdout)?.[1] ?? '""') as string;
    expect(report).toMatch(/^Background subagent agt_\S+ reported: /);
    expect(report.endsWith(` reported: Budget: ${answer}`)).toBe(true);
    const budgetChild = stdout.slice(stdout.indexOf('child budget ('));
    expect(budgetChild).toContain(`│ model: mcp__prices__trip_cost {"city":"Lisbon","nights":2}`);
    expect(budgetChild).toContain(`│ tool: ${answer}\n`);
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
    // The approvals: both calls wait with the budget subagent's path; one approved runs, the denied one's result is the reason.
    const budgetId = /child budget \((\S+)\)/.exec(stdout)?.[1] ?? 'missing';
    const approvals = stdout.slice(stdout.indexOf('== 7. '), stdout.indexOf('== 8. '));
    expect(approvals).toContain('   PUT /v1/approval-rules/prices-ask {"tool":"mcp__prices__trip_cost","rootId":"coordinator","decision":"ask"} → 200\n');
    expect(approvals).toContain('   GET /v1/approvals?state=pending&rootId=coordinator → 200, 2 waiting; the prices server saw 0 calls meanwhile\n');
    const waiting = [...approvals.matchAll(/^ {6}(apr_\S+) mcp__prices__trip_cost (\{.+\}) {2}path (.+)$/gm)].map(([, id, input, path]) => ({ id, input, path }));
    expect(waiting.map((w) => [w.input, w.path])).toEqual([
      ['{"city":"Lisbon","nights":3}', `coordinator > ${budgetId} (budget)`],
      ['{"city":"Porto","nights":3}', `coordinator > ${budgetId} (budget)`],
    ]);
    expect(approvals).toContain(`   POST /v1/approvals/${waiting[0]?.id}/decision {"decision":"approve"} → 200 approved\n`);
    expect(approvals).toContain(`   POST /v1/approvals/${waiting[1]?.id}/decision {"decision":"deny","reason":"We stay in Lisbon."} → 200 denied\n`);
    const ran = /^ {3}approved \{"city":"Lisbon","nights":3\}: the prices server got it with effect key (ek_\S+) \(the approval's\)\n {6}budget subagent read the result (".+")$/m.exec(approvals);
    const lisbon = JSON.parse(ran?.[2] ?? 'null') as string;
    expect(lisbon).toMatch(/^Lisbon, 3 nights: .+ EUR in all\.$/);
    expect(ran?.[1]).not.toBe(mcpCall?.[1]);
    const deniedText = 'Error: a person denied the call to mcp__prices__trip_cost: We stay in Lisbon.';
    expect(approvals).toContain(`   denied {"city":"Porto","nights":3}: the prices server never got it\n      budget subagent read the error ${JSON.stringify(deniedText)}\n`);
    const compared = JSON.parse(/^ {3}coordinator's session: report (".+")$/m.exec(approvals)?.[1] ?? '""') as string;
    expect(compared).toBe(`Background subagent ${budgetId} reported: Compared: ${lisbon} | ${deniedText}`);
    expect(budgetChild).toContain('│ (approval pending: mcp__prices__trip_cost {"city":"Porto","nights":3})\n');
    expect(budgetChild).toContain('│ (approval denied: mcp__prices__trip_cost {"city":"Porto","nights":3} — "We stay in Lisbon.")\n');
    expect(budgetChild).toContain(`│ tool error: ${deniedText}\n`);
    expect(budgetChild).toContain('│ (approval approved: mcp__prices__trip_cost {"city":"Lisbon","nights":3})\n');
    expect(budgetChild).toContain(`│ tool: ${lisbon}\n`);
    const budget = stdout.slice(stdout.indexOf('== 8. '), stdout.indexOf("the coordinator's forest:"));
    const exhausted = /^ {3}event: budget-exhausted (.+)$/gm.exec(budget);
    expect(budget.match(/event: budget-exhausted/g)).toHaveLength(1);
    expect(JSON.parse(exhausted?.[1] ?? 'null')).toEqual({ agentId: expect.stringMatching(/^agt_/), pausedBy: { agentId: 'planner', budget: 'steps' } });
    expect(budget).toContain('forecaster [paused] pausedBy {"agentId":"planner","budget":"steps"}: 3 of 4 days reported; planner [idle]');
    expect(budget).toMatch(/usage {2}planner {5}self 2 steps, \d+ tokens; subtree 5 steps, \d+ tokens; budget 5 steps, 0 remain\n {10}forecaster {2}self 3 steps/);
    expect(budget).toContain('model requests 5, and 0.5 s later still 5');
    expect(budget).toMatch(/PUT \/v1\/agents\/planner\/budget \{"steps":10\} → 200 \{"steps":10,"remaining":\{"steps":[345]\}\}/);
    expect(budget).toContain('forecaster [settled]: 4 of 4 days reported; planner [idle]');
    expect(budget).toMatch(/usage {2}planner {5}self 2 steps, \d+ tokens; subtree 7 steps, \d+ tokens; budget 10 steps, 3 remain\n {10}forecaster {2}self 5 steps/);
    expect(budget).toContain('model requests 7');
    const checks = stdout.slice(stdout.indexOf('checks:'));
    expect(checks.match(/^ {2}ok /gm)).toHaveLength(24);
    expect(checks).not.toContain('FAIL');
  }, 60_000);
});
