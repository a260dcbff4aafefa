/**
 * What the service adds to an MCP tool call: the same `echo` call on a Streamable HTTP MCP
 * server (bench/mcp-echo-server.ts, a process of its own, built with the official SDK) made
 * two ways on loopback, in the same run:
 *
 * - direct: an SDK Client (StreamableHTTPClientTransport) in this process calls the server;
 * - service: `POST /v1/agents/{id}/tool-calls` with `mcp__bench__echo`, and the service (on a
 *   SQLite file, as `npm start` runs it) validates the input, writes a durable `tool-started`
 *   entry, calls the server with its own SDK client and records the call and its result;
 * - baseline, beside them: the bench server's baseline route (it validates the same body and
 *   answers a constant), the floor of any request to the service.
 *
 * Each mode, sequential (one call at a time) and concurrent (`concurrency` lanes, one agent per
 * lane), runs `rounds` rounds after a warm-up of two blocks of each; in each round every side
 * runs one block of calls, in an order reversed from one round to the next, so drift cancels.
 * A call's latency is its wall time seen here; CPU per call is each process's CPU over its
 * block (all its threads, from /proc/<pid>/task/<tid>/sched, which counts in ns where
 * /proc/<pid>/stat counts 10 ms ticks) over the calls: the service's in `service` is what it
 * adds, in `direct` it idles; the MCP server's should be the same either way. Figures per round
 * give the spread.
 *
 * Each block's requests to the service go on connections of their own, closed at its end; the
 * next block starts once both servers are quiet again, and what they spent after the close is
 * kept apart (`tail`): the service hands the SDK each call's client-gone signal, which is the
 * connection's, and the SDK leaves an abort listener on it per call, so a connection's close
 * sends the MCP server one `notifications/cancelled` per call it carried. Writes
 * bench/mcp-tools.json (`--out` elsewhere).
 *
 *   npx tsx bench/mcp-tools.ts [--rounds 5] [--calls 200] [--concurrency 8] [--concurrent-calls 400] [--agents 8] [--store sqlite|memory] [--out path]
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Agent, fetch } from 'undici';
import { arg, buildServer, call, median, root, round3, startServer, type Server } from './lib.js';

const rounds = arg('rounds', 5);
const sequentialCalls = arg('calls', 200);
const concurrency = arg('concurrency', 8);
const concurrentCalls = arg('concurrent-calls', 400);
/** Agents the calls go to: round the agents one call at a time, or lane `i` to agent `i % agents`. */
const agentCount = arg('agents', concurrency);
const option = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : process.argv[i + 1]!;
};
const store = option('store', 'sqlite');
const out = resolve(option('out', join(root, 'bench', 'mcp-tools.json')));

type Side = 'direct' | 'service' | 'baseline';
type Mode = 'sequential' | 'concurrent';
const SIDES: readonly Side[] = ['direct', 'service', 'baseline'];
const MODES: readonly Mode[] = ['sequential', 'concurrent'];
const TEXT = 'a short line for the tool to say back';
const BODY = JSON.stringify({ name: 'mcp__bench__echo', input: { text: TEXT } });

/**
 * CPU time in µs the live threads of `pid` ran so far (`se.sum_exec_runtime` of each), or its
 * 10 ms ticks from /proc/<pid>/stat where the scheduler's file is missing.
 */
function cpuMicros(pid: number): number {
  let total = 0;
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const match = /se\.sum_exec_runtime\s*:\s*([\d.]+)/.exec(readFileSync(`/proc/${pid}/task/${tid}/sched`, 'utf8'));
      if (match === null) return ticksMicros(pid);
      total += Number(match[1]) * 1000;
    }
  } catch {
    return ticksMicros(pid); // no scheduler file here, or a thread ended between the listing and the read
  }
  return total;
}

function ticksMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 1e4;
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

const ms = (n: number): number => +n.toFixed(3);
const us = (n: number): number => +n.toFixed(1);

interface Block {
  latenciesMs: number[];
  wallMs: number;
  /** CPU per call in µs while the calls ran: the service's process, the MCP server's, this process (the client). */
  serviceCpuUs: number;
  mcpCpuUs: number;
  clientCpuUs: number;
  /** CPU per call in µs after the block's connections closed, until both servers were quiet. */
  tailServiceCpuUs: number;
  tailMcpCpuUs: number;
}

const dir = mkdtempSync(join(tmpdir(), 'agentforest-bench-mcp-'));
const mcp = spawn(process.execPath, ['--import', 'tsx', join(root, 'bench', 'mcp-echo-server.ts')], { cwd: root, stdio: ['pipe', 'pipe', 'inherit'] });
let service: Server | undefined;
let client: Client | undefined;
try {
  const [mcpUrl] = (await once(createInterface({ input: mcp.stdout! }), 'line')) as [string];
  buildServer();
  service = await startServer(store === 'memory' ? ':memory:' : join(dir, 'mcp.db'), {
    AGENTFOREST_TOOL_SERVER_CONCURRENCY: String(Math.max(8, concurrency)),
  });
  const servicePid = service.child.pid!;
  const mcpPid = mcp.pid!;
  const view = await call<{ state: string; tools: { name: string }[] }>(`${service.url}/v1/tool-servers/bench`, 'PUT', { url: mcpUrl });
  if (view.state !== 'ready' || !view.tools.some((t) => t.name === 'echo')) throw new Error(`the MCP server was not listed: ${JSON.stringify(view)}`);
  const agents = await Promise.all(
    Array.from({ length: agentCount }, async () => {
      const created = await call<{ agent: { id: string }; agentToken: string }>(`${service!.url}/v1/agents`, 'POST', { tools: ['mcp__bench__*'] });
      return { url: `${service!.url}/v1/agents/${created.agent.id}/tool-calls`, token: created.agentToken };
    }),
  );
  const baselineUrl = `${service.url}/bench/baseline`;
  const mcpClient = new Client({ name: 'bench', version: '1' }, { capabilities: {} });
  client = mcpClient;
  await mcpClient.connect(new StreamableHTTPClientTransport(new URL(mcpUrl)));

  const post = async (url: string, token: string, dispatcher: Agent): Promise<Record<string, unknown>> => {
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-agent-token': token }, body: BODY, dispatcher });
    const body = (await res.json()) as Record<string, unknown>;
    if (res.status !== 200) throw new Error(`${url}: ${res.status} ${JSON.stringify(body)}`);
    return body;
  };
  const calls: Record<Side, (agent: number, dispatcher: Agent) => Promise<void>> = {
    async direct() {
      const result = await mcpClient.callTool({ name: 'echo', arguments: { text: TEXT } });
      const text = (result.content as { text?: string }[])[0]?.text;
      if (result.isError === true || text !== TEXT) throw new Error(`direct: unexpected result ${JSON.stringify(result)}`);
    },
    async service(agent, dispatcher) {
      const body = await post(agents[agent]!.url, agents[agent]!.token, dispatcher);
      if (body.isError !== false || body.content !== TEXT) throw new Error(`service: unexpected result ${JSON.stringify(body)}`);
    },
    async baseline(agent, dispatcher) {
      await post(baselineUrl, agents[agent]!.token, dispatcher);
    },
  };

  /** Wait until neither server spent 0.5 ms of CPU in 100 ms, five times running (at most 10 s); what they spent meanwhile. */
  const settle = async (): Promise<{ service: number; mcp: number }> => {
    const start = { service: cpuMicros(servicePid), mcp: cpuMicros(mcpPid) };
    let last = start;
    const deadline = Date.now() + 10_000;
    for (let quiet = 0; quiet < 5 && Date.now() < deadline; ) {
      await sleep(100);
      const now = { service: cpuMicros(servicePid), mcp: cpuMicros(mcpPid) };
      quiet = now.service - last.service < 500 && now.mcp - last.mcp < 500 ? quiet + 1 : 0;
      last = now;
    }
    return { service: last.service - start.service, mcp: last.mcp - start.mcp };
  };

  const runBlock = async (side: Side, mode: Mode, count: number): Promise<Block> => {
    const latenciesMs: number[] = [];
    const lanes = mode === 'sequential' ? 1 : concurrency;
    const dispatcher = new Agent({ connections: lanes });
    const before = { service: cpuMicros(servicePid), mcp: cpuMicros(mcpPid), client: process.cpuUsage() };
    const started = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: lanes }, async (_, lane) => {
        while (next < count) {
          const agent = (mode === 'sequential' ? next : lane) % agents.length;
          next++;
          const at = performance.now();
          await calls[side](agent, dispatcher);
          latenciesMs.push(performance.now() - at);
        }
      }),
    );
    const wallMs = performance.now() - started;
    const clientCpu = process.cpuUsage(before.client);
    const during = { service: cpuMicros(servicePid) - before.service, mcp: cpuMicros(mcpPid) - before.mcp };
    await dispatcher.close();
    const tail = await settle();
    return {
      latenciesMs,
      wallMs,
      serviceCpuUs: during.service / count,
      mcpCpuUs: during.mcp / count,
      clientCpuUs: (clientCpu.user + clientCpu.system) / count,
      tailServiceCpuUs: tail.service / count,
      tailMcpCpuUs: tail.mcp / count,
    };
  };

  const countOf: Record<Mode, number> = { sequential: sequentialCalls, concurrent: concurrentCalls };
  // The warm-up: two blocks of each (after one, the first round still ran slower than the rest).
  for (let pass = 0; pass < 2; pass++) for (const mode of MODES) for (const side of SIDES) await runBlock(side, mode, countOf[mode]);
  const blocks: Record<Mode, Record<Side, Block[]>> = {
    sequential: { direct: [], service: [], baseline: [] },
    concurrent: { direct: [], service: [], baseline: [] },
  };
  const ticksBefore = { service: ticksMicros(servicePid), mcp: ticksMicros(mcpPid) };
  const schedBefore = { service: cpuMicros(servicePid), mcp: cpuMicros(mcpPid) };
  for (let r = 0; r < rounds; r++) {
    for (const mode of MODES) {
      for (const side of r % 2 === 0 ? SIDES : [...SIDES].reverse()) blocks[mode][side].push(await runBlock(side, mode, countOf[mode]));
    }
  }
  // The scheduler's ns against /proc's ticks over the measured rounds: a thread that ended would set them apart.
  const cpuSources = {
    serviceSchedOverTicks: round3((cpuMicros(servicePid) - schedBefore.service) / (ticksMicros(servicePid) - ticksBefore.service)),
    mcpSchedOverTicks: round3((cpuMicros(mcpPid) - schedBefore.mcp) / (ticksMicros(mcpPid) - ticksBefore.mcp)),
  };

  const rows = MODES.flatMap((mode) =>
    SIDES.map((side) => {
      const bs = blocks[mode][side];
      const all = bs.flatMap((b) => b.latenciesMs);
      return {
        mode,
        side,
        calls: all.length,
        callsPerSecond: Math.round(median(bs.map((b) => (b.latenciesMs.length / b.wallMs) * 1000))),
        medianMs: ms(median(all)),
        p95Ms: ms(percentile(all, 0.95)),
        serviceCpuUs: us(median(bs.map((b) => b.serviceCpuUs))),
        mcpServerCpuUs: us(median(bs.map((b) => b.mcpCpuUs))),
        clientCpuUs: us(median(bs.map((b) => b.clientCpuUs))),
        tailServiceCpuUs: us(median(bs.map((b) => b.tailServiceCpuUs))),
        tailMcpServerCpuUs: us(median(bs.map((b) => b.tailMcpCpuUs))),
        rounds: {
          medianMs: bs.map((b) => ms(median(b.latenciesMs))),
          p95Ms: bs.map((b) => ms(percentile(b.latenciesMs, 0.95))),
          serviceCpuUs: bs.map((b) => us(b.serviceCpuUs)),
          mcpServerCpuUs: bs.map((b) => us(b.mcpCpuUs)),
        },
      };
    }),
  );
  console.table(rows.map(({ rounds: _rounds, ...row }) => row));

  /** Per round, `figure` of the service's block against `against`'s block of that round. */
  const perRound = (mode: Mode, figure: (b: Block) => number, against: Side, how: (a: number, b: number) => number): number[] =>
    blocks[mode].service.map((b, i) => how(figure(b), figure(blocks[mode][against][i]!)));
  const summarise = (values: number[], digits: (n: number) => number) => ({ median: digits(median(values)), rounds: values.map(digits) });
  const minus = (a: number, b: number): number => a - b;
  const over = (a: number, b: number): number => a / b;
  const added = Object.fromEntries(
    MODES.map((mode) => [
      mode,
      {
        // The service's added latency per call: its median (and p95) less the direct call's, per round.
        latencyMedianMs: summarise(perRound(mode, (b) => median(b.latenciesMs), 'direct', minus), ms),
        latencyP95Ms: summarise(perRound(mode, (b) => percentile(b.latenciesMs, 0.95), 'direct', minus), ms),
        // Through the service against the direct call, per round (1 = nothing added).
        latencyMedianRatio: summarise(perRound(mode, (b) => median(b.latenciesMs), 'direct', over), round3),
        // What the service does beyond answering a request: its median less the baseline route's.
        latencyMedianOverBaselineMs: summarise(perRound(mode, (b) => median(b.latenciesMs), 'baseline', minus), ms),
        // The service's CPU per call, all of it added (a direct call does not touch it); over the baseline route's.
        serviceCpuUs: summarise(blocks[mode].service.map((b) => b.serviceCpuUs), us),
        serviceCpuOverBaseline: summarise(perRound(mode, (b) => b.serviceCpuUs, 'baseline', over), round3),
        // The service's CPU per call against what this process's SDK client spent per direct call.
        serviceCpuOverDirectClient: summarise(blocks[mode].service.map((b, i) => b.serviceCpuUs / blocks[mode].direct[i]!.clientCpuUs), round3),
        // The check: the MCP server's CPU per call through the service against direct (about 1).
        mcpServerCpuServiceOverDirect: summarise(perRound(mode, (b) => b.mcpCpuUs, 'direct', over), round3),
        // After the block's connections closed: the service's and the MCP server's CPU per call it had carried.
        tailServiceCpuUs: summarise(blocks[mode].service.map((b) => b.tailServiceCpuUs), us),
        tailMcpServerCpuUs: summarise(blocks[mode].service.map((b) => b.tailMcpCpuUs), us),
        // The service's CPU per call while the direct calls ran (idle: timers and the like).
        serviceIdleCpuUsDuringDirect: summarise(blocks[mode].direct.map((b) => b.serviceCpuUs), us),
      },
    ]),
  );
  console.log(JSON.stringify(added));
  const summary = { store, rounds, callsPerRound: countOf, concurrency, agents: agentCount, cpuSources };
  console.log(JSON.stringify(summary));
  writeFileSync(out, `${JSON.stringify({ at: new Date().toISOString(), ...summary, sides: rows, added }, null, 2)}\n`);
} finally {
  await client?.close();
  await service?.stop();
  mcp.stdin?.end();
  mcp.kill();
  rmSync(dir, { recursive: true, force: true });
}
