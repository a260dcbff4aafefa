/**
 * Prometheus metrics (prom-client), on a registry of their own so several apps in one process
 * (tests) never share counters. Counters are fed by what the runtime tells its observers
 * (`observer`, commits included); gauges of live state are computed when scraped.
 */
import client from 'prom-client';
import type { DriverEvent } from '../driver/model-driver.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { ReportDelivery } from '../domain/packages.js';
import type { RuntimeObserver } from './runtime-observer.js';
import type { BatchEntry, WriteBatch } from '../sessions/session-store.js';
import { addUsage, zeroUsage, type Usage } from '../domain/budget.js';
import { chargeOf } from '../domain/charges.js';
import { queuedCount, stagedCount } from '../domain/turn-machine.js';
import { statusOf } from '../agents/reads/views.js';
import type { LiveAgent } from '../agents/live-agent.js';

export interface MetricsDeps {
  registry: AgentRegistry;
  isDraining: () => boolean;
  openStreams: () => number;
  /** Whether a budget pauses a live agent (its status is then `paused`). */
  paused: (agent: LiveAgent) => boolean;
  /** Each forest whose accounts are held here, with what its whole tree spent. */
  forestTotals: () => { rootId: string; usage: Usage }[];
  /**
   * Also the process's own metrics: prom-client's defaults (`process_*` CPU, memory and file
   * descriptors; `nodejs_*` heap, GC, event-loop lag and handles). One per process: their
   * event-loop monitor runs for good once started.
   */
  processMetrics?: boolean;
}

/** Forests with a series of their own in agentforest_forest_usage: the ones that spent most. */
export const METRICS_TOP_FORESTS = 20;

/**
 * Counts by a pair of label values, kept as plain numbers: a labelled prom-client metric
 * hashes its labels on every increment, which is too dear per report or per live agent.
 */
type PairCounts = Map<string, Map<string, number>>;

function countPair(counts: PairCounts, first: string, second: string): void {
  let inner = counts.get(first);
  if (inner === undefined) counts.set(first, (inner = new Map()));
  inner.set(second, (inner.get(second) ?? 0) + 1);
}

/** Adds the counts to a metric (just reset by its collect hook), once per pair of labels. */
function addPairs<L extends string>(metric: { inc(labels: Partial<Record<L, string>>, value: number): void }, counts: PairCounts, first: L, second: L): void {
  for (const [a, inner] of counts) for (const [b, n] of inner) metric.inc({ [first]: a, [second]: b } as Partial<Record<L, string>>, n);
}

/** Wakeup reports remembered until their parent turn starts, to time report-to-turn latency. */
const MAX_PENDING_WAKEUPS = 10_000;

export class Metrics {
  readonly registry = new client.Registry();
  readonly contentType = this.registry.contentType;
  private readonly httpRequests: client.Counter<'method' | 'route' | 'status'>;
  private readonly httpDuration: client.Histogram<'method' | 'route' | 'status'>;
  /** Report calls by delivery mode, then outcome, which the reports counter reads when scraped. */
  private readonly reportCounts: PairCounts = new Map();
  private readonly reportToTurn: client.Histogram;
  private readonly coldResumes: client.Counter;
  private readonly settlements: client.Counter;
  private readonly storeCommit: client.Histogram;
  private readonly storeEntries: client.Counter;
  private readonly wakeups = new Map<string, number>();
  private readonly modelRequests: client.Counter<'outcome'>;
  private readonly providerRequests: client.Counter<'provider' | 'outcome'>;
  private readonly fallbacks: client.Counter<'provider'>;
  private readonly backoffs: client.Histogram<'provider'>;
  private readonly modelRetries: client.Counter;
  private readonly modelDuration: client.Histogram<'outcome'>;
  private readonly firstDelta: client.Histogram<'provider'>;
  private readonly modelTokens: client.Counter<'kind'>;
  private readonly interrupts: client.Counter<'origin'>;
  private readonly leaseEvents: client.Counter<'event'>;
  private readonly budgetPauses: client.Counter;
  private readonly spending: client.Counter<'kind'>;
  private readonly toolServerCalls: client.Counter<'server' | 'outcome'>;
  private readonly toolServerDuration: client.Histogram<'server'>;

  constructor(deps: MetricsDeps) {
    if (deps.processMetrics === true) client.collectDefaultMetrics({ register: this.registry });
    const registers = [this.registry];
    this.httpRequests = new client.Counter({ name: 'agentforest_http_requests_total', help: 'HTTP requests by route and status.', labelNames: ['method', 'route', 'status'], registers });
    this.httpDuration = new client.Histogram({
      name: 'agentforest_http_request_duration_seconds',
      help: 'HTTP request latency by route and status.',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60],
      registers,
    });
    const reportCounts = this.reportCounts;
    new client.Counter({
      name: 'agentforest_reports_total',
      help: 'report calls by delivery mode and outcome (accepted or an error code).',
      labelNames: ['delivery', 'outcome'],
      registers,
      collect() {
        this.reset();
        addPairs(this, reportCounts, 'delivery', 'outcome');
      },
    });
    this.reportToTurn = new client.Histogram({
      name: 'agentforest_report_to_parent_turn_seconds',
      help: 'Wakeup delivery: from report acceptance to the start of the parent turn it queued.',
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120],
      registers,
    });
    this.coldResumes = new client.Counter({ name: 'agentforest_cold_resumes_total', help: 'Settled children cold-resumed from their sessions.', registers });
    this.settlements = new client.Counter({ name: 'agentforest_settlements_total', help: 'Child Activations that settled.', registers });
    this.interrupts = new client.Counter({ name: 'agentforest_interrupts_total', help: 'Agents interrupted, by who asked (tool: interrupt_agent; operator: HTTP).', labelNames: ['origin'], registers });
    this.leaseEvents = new client.Counter({
      name: 'agentforest_step_leases_total',
      help: 'Step lease events: expired (a claim held its step past its lease) and reclaimed (a lapsed step claimed again).',
      labelNames: ['event'],
      registers,
    });
    this.storeCommit = new client.Histogram({
      name: 'agentforest_store_commit_seconds',
      help: 'Session store write latency per group-committed batch.',
      buckets: [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1],
      registers,
    });
    this.storeEntries = new client.Counter({ name: 'agentforest_store_entries_total', help: 'Session entries committed.', registers });
    this.modelRequests = new client.Counter({ name: 'agentforest_model_requests_total', help: 'Requests the built-in model driver made to a model (steps and compaction summaries), by outcome (ok or failed).', labelNames: ['outcome'], registers });
    this.providerRequests = new client.Counter({
      name: 'agentforest_model_provider_requests_total',
      help: 'Requests the built-in driver had for each provider (`<baseUrl> <model>`), one per attempt, by outcome: ok, 429, 5xx, 4xx, timeout, unreachable, invalid, or fallback (not sent: the provider was in back-off or at its limit, and the next model was asked).',
      labelNames: ['provider', 'outcome'],
      registers,
    });
    this.fallbacks = new client.Counter({
      name: 'agentforest_model_fallbacks_total',
      help: "Attempts at a provider that failed over to the model's next fallback.",
      labelNames: ['provider'],
      registers,
    });
    this.firstDelta = new client.Histogram({
      name: 'agentforest_model_first_delta_seconds',
      help: "Built-in driver: time from sending a step's request to a provider (`<baseUrl> <model>`) to the first piece of its answer.",
      labelNames: ['provider'],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
    this.backoffs = new client.Histogram({
      name: 'agentforest_model_backoff_seconds',
      help: 'How long a provider (`<baseUrl> <model>`) asked to be left alone, each time it did (a 429 or 503 with Retry-After or retry-after-ms).',
      labelNames: ['provider'],
      buckets: [0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 3600, 86400],
      registers,
    });
    this.modelRetries = new client.Counter({ name: 'agentforest_model_retries_total', help: 'Model requests the built-in driver repeated after a 429, 5xx or connection failure.', registers });
    this.modelDuration = new client.Histogram({
      name: 'agentforest_model_request_seconds',
      help: 'Built-in driver: time per step from sending the request to the answer, retries included.',
      labelNames: ['outcome'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers,
    });
    this.toolServerCalls = new client.Counter({
      name: 'agentforest_tool_server_calls_total',
      help: 'MCP tool calls the service made, by server and outcome (answered, error: the server said the call failed, unreachable, timeout).',
      labelNames: ['server', 'outcome'],
      registers,
    });
    this.toolServerDuration = new client.Histogram({
      name: 'agentforest_tool_server_call_seconds',
      help: 'Time per MCP tool call, from asking for a slot of its server to the answer.',
      labelNames: ['server'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
    this.modelTokens = new client.Counter({ name: 'agentforest_model_tokens_total', help: 'Tokens reported by model endpoints, by kind (prompt or completion).', labelNames: ['kind'], registers });
    const live = (): Iterable<LiveAgent> => deps.registry.values();
    const sum = (of: (agent: LiveAgent) => number): number => {
      let n = 0;
      for (const agent of live()) n += of(agent);
      return n;
    };
    new client.Gauge({
      name: 'agentforest_live_agents',
      help: 'Live agents by kind and status.',
      labelNames: ['kind', 'status'],
      registers,
      // Counted in plain numbers, then set once per label pair: with 100,000 live agents, a
      // view and a labelled increment per agent held the event loop for a second per scrape.
      collect() {
        this.reset();
        const counts: PairCounts = new Map();
        for (const agent of live()) countPair(counts, agent.header.kind, statusOf(agent, deps.paused(agent)));
        addPairs(this, counts, 'kind', 'status');
      },
    });
    new client.Gauge({
      name: 'agentforest_inbox_depth',
      help: 'Queued inbox items across live agents.',
      registers,
      collect() {
        this.set(sum((a) => queuedCount(a.state)));
      },
    });
    new client.Gauge({
      name: 'agentforest_staged_messages',
      help: 'Staged context messages across live agents.',
      registers,
      collect() {
        this.set(sum((a) => stagedCount(a.state)));
      },
    });
    new client.Gauge({
      name: 'agentforest_draining',
      help: '1 while the service drains.',
      registers,
      collect() {
        this.set(deps.isDraining() ? 1 : 0);
      },
    });
    new client.Gauge({
      name: 'agentforest_event_streams',
      help: 'Open event streams.',
      registers,
      collect() {
        this.set(deps.openStreams());
      },
    });
    this.budgetPauses = new client.Counter({ name: 'agentforest_budget_pauses_total', help: 'Agents paused because a budget (their own or an ancestor\'s) was spent.', registers });
    this.spending = new client.Counter({
      name: 'agentforest_usage_total',
      help: 'What agents spent, committed to the log: kind steps (claimed), tokens (totalTokens of recorded usage), cost_micro_usd.',
      labelNames: ['kind'],
      registers,
    });
    new client.Gauge({
      name: 'agentforest_forest_usage',
      help: `What a forest's whole tree spent, by root and kind (steps, tokens, cost_micro_usd), for the ${METRICS_TOP_FORESTS} forests held here that spent the most tokens.`,
      labelNames: ['root', 'kind'],
      registers,
      collect() {
        this.reset();
        const top = deps.forestTotals().sort((a, b) => b.usage.totalTokens - a.usage.totalTokens || b.usage.steps - a.usage.steps).slice(0, METRICS_TOP_FORESTS);
        for (const { rootId, usage } of top) {
          this.set({ root: rootId, kind: 'steps' }, usage.steps);
          this.set({ root: rootId, kind: 'tokens' }, usage.totalTokens);
          this.set({ root: rootId, kind: 'cost_micro_usd' }, usage.costMicroUsd);
        }
      },
    });
  }

  /** What the metrics count of the runtime (the observer list in the wiring). */
  readonly observer: RuntimeObserver = {
    committed: (batch, elapsedMs) => this.committed(batch, elapsedMs),
    budgetExhausted: () => this.budgetPauses.inc(),
    report: (delivery, outcome, messageId) => this.reported(delivery, outcome, messageId),
    coldResumed: () => this.coldResumes.inc(),
    settled: () => this.settlements.inc(),
    stepLease: (event) => this.leaseEvents.inc({ event }),
    interrupted: (origin, count) => {
      if (count > 0) this.interrupts.inc({ origin }, count);
    },
    modelRequest: (event) => this.modelRequest(event),
  };

  private committed(batch: WriteBatch, elapsedMs: number): void {
    this.storeCommit.observe(elapsedMs / 1000);
    this.storeEntries.inc(batch.entries.length);
    this.countSpending(batch.entries);
    if (this.wakeups.size === 0) return;
    for (const { entry } of batch.entries) {
      if (entry.type !== 'turn-start') continue;
      const accepted = this.wakeups.get(entry.messageId);
      if (accepted === undefined) continue;
      this.wakeups.delete(entry.messageId);
      this.reportToTurn.observe((performance.now() - accepted) / 1000);
    }
  }

  private reported(delivery: ReportDelivery, outcome: string, messageId: string | undefined): void {
    countPair(this.reportCounts, delivery, outcome);
    if (delivery === 'wakeup' && messageId !== undefined) {
      if (this.wakeups.size >= MAX_PENDING_WAKEUPS) {
        const oldest = this.wakeups.keys().next().value;
        if (oldest !== undefined) this.wakeups.delete(oldest);
      }
      this.wakeups.set(messageId, performance.now());
    }
  }

  private modelRequest(event: DriverEvent): void {
    if (event.kind === 'attempt') {
      this.providerRequests.inc({ provider: event.provider, outcome: event.outcome });
      if (event.fellOver) this.fallbacks.inc({ provider: event.provider });
      return;
    }
    if (event.kind === 'first-delta') {
      this.firstDelta.observe({ provider: event.provider }, event.seconds);
      return;
    }
    if (event.kind === 'backoff') {
      this.backoffs.observe({ provider: event.provider }, event.seconds);
      return;
    }
    if (event.kind === 'tokens') {
      this.modelTokens.inc({ kind: 'prompt' }, event.prompt);
      this.modelTokens.inc({ kind: 'completion' }, event.completion);
      return;
    }
    this.modelRequests.inc({ outcome: event.outcome });
    if (event.attempts > 1) this.modelRetries.inc(event.attempts - 1);
    this.modelDuration.observe({ outcome: event.outcome }, event.seconds);
  }

  private countSpending(entries: readonly BatchEntry[]): void {
    const total = zeroUsage();
    for (const { entry } of entries) {
      const charge = chargeOf(entry);
      if (charge !== undefined) addUsage(total, charge);
    }
    if (total.steps > 0) this.spending.inc({ kind: 'steps' }, total.steps);
    if (total.totalTokens > 0) this.spending.inc({ kind: 'tokens' }, total.totalTokens);
    if (total.costMicroUsd > 0) this.spending.inc({ kind: 'cost_micro_usd' }, total.costMicroUsd);
  }

  /** One MCP tool call and how long it took (tools/mcp/tool-server.ts). */
  toolServerCall(server: string, outcome: string, seconds: number): void {
    this.toolServerCalls.inc({ server, outcome });
    this.toolServerDuration.observe({ server }, seconds);
  }

  httpRequest(method: string, route: string, status: number, seconds: number): void {
    const labels = { method, route, status: String(status) };
    this.httpRequests.inc(labels);
    this.httpDuration.observe(labels, seconds);
  }

  async text(): Promise<string> {
    return this.registry.metrics();
  }
}
