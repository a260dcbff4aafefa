/**
 * The demo's tree budget: a second root, the planner, is created with a budget of 5 steps
 * (model requests) for its whole forest. It spends 2 on starting a forecaster, which reports
 * the weather day by day, one report per step, so the forecaster's third step spends the rest:
 * its fourth is not handed out. The forecaster is paused by the planner's budget (its view,
 * the forest's `budget-exhausted` event), and no model request follows. The operator raises
 * the budget to 10 steps and the forecaster finishes; the forest's usage
 * (`GET /v1/agents/planner/usage?subtree=true`) is printed at both moments.
 *
 * The forecaster's reports arrive quietly, so that the planner takes no turn for them and the
 * steps spent are the same in every run.
 */
import { isDeepStrictEqual } from 'node:util';
import { children, session, type Api, type View } from './forest.js';
import { call, hasTool, lastMessage, type ChatRequest, type Reply, type ScriptedModelServer } from './scripted-model.js';

export const PLANNER = 'planner';
const INSTRUCTIONS =
  'You plan what to pack for a trip. Start subagents with spawn_subagent (give each a label) and answer briefly. ' +
  'Subagents deliver findings with their report tool.';
const ASK = 'Start a forecaster subagent for the weather in Lisbon from Friday to Monday, one report per day.';
const FORECAST_TASK = 'Report the weather in Lisbon for Friday, Saturday, Sunday and Monday: one report per day, then say you are done.';
const FORECASTS = ['Friday: sunny, 24 °C.', 'Saturday: sunny, 25 °C.', 'Sunday: cloudy, 21 °C.', 'Monday: rain, 18 °C.'];
const BUDGET_STEPS = 5;
const RAISED_STEPS = 10;
/** The planner's steps (spawn, then its answer) and the forecaster's (a report a day, then its answer). */
const PLANNER_STEPS = 2;
const FORECASTER_STEPS = FORECASTS.length + 1;

/**
 * The scripted model's answers for the planner's forest; undefined for another forest's request.
 * The forecaster's first answer waits for the planner's second request: that request is sent
 * once its step was claimed, so the planner has spent its 2 steps before the forecaster can
 * claim its second, and the 5 steps always split 2 and 3.
 */
export class BudgetScript {
  private plannerDone!: () => void;
  private readonly plannerSpent = new Promise<void>((resolve) => (this.plannerDone = resolve));

  answer(request: ChatRequest): Promise<Reply> | undefined {
    if (isPlanner(request)) return Promise.resolve(this.planner(request));
    if (isForecaster(request)) return this.forecaster(request);
    return undefined;
  }

  private planner(request: ChatRequest): Reply {
    const last = lastMessage(request);
    if (last?.role === 'tool') {
      this.plannerDone();
      return { answer: { content: 'Started the forecaster; its forecasts will arrive as reports.' } };
    }
    if (/start a forecaster/i.test(last?.content ?? '')) {
      return { answer: { toolCalls: [call('spawn_subagent', { prompt: FORECAST_TASK, label: 'forecaster' })] } };
    }
    return { answer: { content: 'Noted.' } };
  }

  private async forecaster(request: ChatRequest): Promise<Reply> {
    const reported = request.messages.filter((m) => m.tool_calls?.some((c) => c.function.name === 'report')).length;
    if (reported === 0) await this.plannerSpent;
    if (reported < FORECASTS.length) return { answer: { toolCalls: [call('report', { output: FORECASTS[reported] })] } };
    return { answer: { content: 'Done: four days reported.' } };
  }
}

/**
 * The PUT's answer: the new limit, and what remains of it when the answer was made. The raise
 * offers the paused step at once and the answer waits for the change to be durable, so the
 * remainder may already count a step or two the forecaster claimed meanwhile.
 */
function raisedTo(answer: unknown): boolean {
  const { steps, remaining } = answer as { steps?: number; remaining?: { steps?: number } };
  const left = remaining?.steps ?? -1;
  return steps === RAISED_STEPS && left <= RAISED_STEPS - BUDGET_STEPS && left >= RAISED_STEPS - PLANNER_STEPS - FORECASTER_STEPS;
}

function isPlanner(request: ChatRequest): boolean {
  return request.messages[0]?.role === 'system' && request.messages[0].content === INSTRUCTIONS;
}

function isForecaster(request: ChatRequest): boolean {
  return hasTool(request, 'report') && request.messages.some((m) => m.role === 'user' && m.content === FORECAST_TASK);
}

interface Usage {
  steps: number;
  totalTokens: number;
}

interface UsageRow {
  agentId: string;
  parentId: string | null;
  usage: { self: Usage; subtree: Usage };
  budget: { steps?: number; remaining: { steps?: number } } | null;
}

/** The forest as one moment of the demo saw it. */
interface Moment {
  planner: View;
  forecaster: View | undefined;
  /** Forecasts that reached the planner (quietly, as messages in its session). */
  reports: number;
  usage: UsageRow[];
  /** The planner's forest's model requests the scripted model saw (undefined with a real model). */
  requests: number | undefined;
}

interface SseEvent {
  id?: string;
  event: string;
  data: unknown;
}

export interface BudgetDemo {
  /** Step 7: create the planner with its budget and wait until the budget stops its forest. */
  stop(): Promise<void>;
  /** Step 8: raise the budget and wait until the forest is done. */
  raise(): Promise<void>;
  /** The checks of both steps; closes the event stream. */
  checks(): [string, boolean][];
}

export interface BudgetDemoDeps {
  api: Api;
  /** The service's base URL, for the event stream. */
  url: string;
  model: Record<string, unknown>;
  scripted: ScriptedModelServer | undefined;
  until: <T>(what: string, probe: () => Promise<T | undefined>) => Promise<T>;
  pause: (ms: number) => Promise<void>;
}

export function budgetDemo(deps: BudgetDemoDeps): BudgetDemo {
  const { api, scripted, until, pause } = deps;
  const events: SseEvent[] = [];
  const stream = new AbortController();
  let stopped: Moment | undefined;
  let calmRequests: number | undefined;
  let raised: unknown;
  let finished: Moment | undefined;
  let budgetEntries = 0;

  const requests = (): number | undefined => scripted?.requests.filter((r) => isPlanner(r.body) || isForecaster(r.body)).length;

  async function moment(): Promise<Moment> {
    const planner = (await api('GET', `/v1/agents/${PLANNER}`)) as View;
    const child = (await children(api, PLANNER))[0];
    const forecaster = child === undefined ? undefined : ((await api('GET', `/v1/agents/${child.id}`)) as View);
    const reports = (await session(api, PLANNER)).filter((e) => e.source?.kind === 'subagent-report').length;
    const usage = ((await api('GET', `/v1/agents/${PLANNER}/usage?subtree=true`)) as { items: UsageRow[] }).items;
    return { planner, forecaster, reports, usage, requests: requests() };
  }

  /** At rest: nothing running, queued or staged, in the whole forest. */
  const atRest = (m: Moment): boolean =>
    [m.planner, ...(m.forecaster === undefined ? [] : [m.forecaster])].every(
      (v) => (v.status === 'idle' || v.status === 'settled') && v.inbox.queued === 0 && v.staged === 0,
    );

  function print(m: Moment): void {
    const f = m.forecaster;
    const by = f?.pausedBy === undefined ? '' : ` pausedBy ${JSON.stringify(f.pausedBy)}`;
    console.log(`   forecaster [${f?.status ?? 'missing'}]${by}: ${m.reports} of ${FORECASTS.length} days reported; planner [${m.planner.status}]`);
    for (const [i, row] of m.usage.entries()) {
      const name = row.agentId === PLANNER ? PLANNER : 'forecaster';
      const figures = (u: Usage): string => `${u.steps} steps, ${u.totalTokens} tokens`;
      const budget = row.budget === null ? 'no budget of its own' : `budget ${row.budget.steps} steps, ${row.budget.remaining.steps} remain`;
      console.log(`   ${i === 0 ? 'usage' : '     '}  ${name.padEnd(10)}  self ${figures(row.usage.self)}; subtree ${figures(row.usage.subtree)}; ${budget}`);
    }
  }

  return {
    async stop() {
      await api('PUT', '/v1/packages/subagent-report', { config: { reportDelivery: 'quiet' } });
      await api('POST', '/v1/agents', { id: PLANNER, instructions: INSTRUCTIONS, model: deps.model, budget: { steps: BUDGET_STEPS } });
      console.log(`   POST /v1/agents {"id":"${PLANNER}","budget":{"steps":${BUDGET_STEPS}},…} → 201`);
      void follow(`${deps.url}/v1/agents/${PLANNER}/events?forest=true`, stream.signal, events);
      await until('the forest event stream is open', async () => (events.length > 0 ? true : undefined));
      await api('POST', `/v1/agents/${PLANNER}/messages`, { content: ASK, delivery: 'followup' });
      stopped = await until('the budget stops the forest', async () => {
        const m = await moment();
        const told = events.some((e) => e.event === 'budget-exhausted');
        // A real model may finish within the budget: then the forest comes to rest unpaused.
        return (m.forecaster?.status === 'paused' && told && m.planner.status === 'idle') || (scripted === undefined && m.forecaster !== undefined && atRest(m)) ? m : undefined;
      });
      for (const e of events.filter((e) => e.event === 'budget-exhausted')) console.log(`   event: budget-exhausted ${JSON.stringify(e.data)}`);
      print(stopped);
      // A calm of 0.5 s: a paused forest sends the model nothing.
      await pause(500);
      calmRequests = requests();
      if (stopped.requests !== undefined) console.log(`   model requests ${stopped.requests}, and 0.5 s later still ${calmRequests}`);
    },

    async raise() {
      raised = await api('PUT', `/v1/agents/${PLANNER}/budget`, { steps: RAISED_STEPS });
      console.log(`   PUT /v1/agents/${PLANNER}/budget {"steps":${RAISED_STEPS}} → 200 ${JSON.stringify(raised)}`);
      let calm = 0;
      finished = await until('the forest finishes', async () => {
        const m = await moment();
        calm = atRest(m) && m.forecaster?.status === 'settled' ? calm + 1 : 0;
        return calm >= 3 ? m : undefined;
      });
      print(finished);
      if (finished.requests !== undefined) console.log(`   model requests ${finished.requests}`);
      budgetEntries = (await session(api, PLANNER)).filter((e) => e.type === 'budget').length;
    },

    checks() {
      stream.abort();
      const told = events.filter((e) => e.event === 'budget-exhausted');
      const forecasterId = stopped?.forecaster?.id;
      const pausedBy = { agentId: PLANNER, budget: 'steps' };
      const root = (m: Moment | undefined): UsageRow | undefined => m?.usage.find((r) => r.agentId === PLANNER);
      const adds = (m: Moment | undefined): boolean => {
        const [top, ...below] = m?.usage ?? [];
        if (top?.agentId !== PLANNER || below.length !== 1) return false;
        const sum = (k: keyof Usage): number => top.usage.self[k] + below.reduce((n, r) => n + r.usage.subtree[k], 0);
        return top.usage.subtree.steps === sum('steps') && top.usage.subtree.totalTokens === sum('totalTokens') && below[0]!.parentId === PLANNER;
      };
      const steps = (m: Moment | undefined, id: string | undefined): number | undefined => m?.usage.find((r) => r.agentId === id)?.usage.self.steps;
      return [
        [
          `a budget of ${BUDGET_STEPS} steps stopped the forest: the forecaster paused by the planner's budget, the planner idle`,
          stopped?.forecaster?.status === 'paused' && isDeepStrictEqual(stopped.forecaster.pausedBy, pausedBy) && stopped.planner.status === 'idle',
        ],
        [
          'budget-exhausted was sent once, without an id, naming the forecaster and the planner\'s steps budget',
          told.length === 1 && told[0]!.id === undefined && isDeepStrictEqual(told[0]!.data, { agentId: forecasterId, pausedBy }),
        ],
        [
          `the stopped forest spent its ${BUDGET_STEPS} steps (the planner ${PLANNER_STEPS}, the forecaster ${BUDGET_STEPS - PLANNER_STEPS}) and sent the model nothing more`,
          root(stopped)?.usage.subtree.steps === BUDGET_STEPS &&
            root(stopped)?.budget?.remaining.steps === 0 &&
            steps(stopped, PLANNER) === PLANNER_STEPS &&
            stopped?.reports === BUDGET_STEPS - PLANNER_STEPS &&
            (scripted === undefined || (stopped.requests === BUDGET_STEPS && calmRequests === BUDGET_STEPS)),
        ],
        [
          `raising the budget to ${RAISED_STEPS} steps let the forecaster finish: every day reported, ${PLANNER_STEPS + FORECASTER_STEPS} steps spent`,
          raisedTo(raised) &&
            finished?.reports === FORECASTS.length &&
            root(finished)?.usage.subtree.steps === PLANNER_STEPS + FORECASTER_STEPS &&
            steps(finished, forecasterId) === FORECASTER_STEPS &&
            (scripted === undefined || finished.requests === PLANNER_STEPS + FORECASTER_STEPS) &&
            budgetEntries === 1,
        ],
        ["the planner's subtree figures are its own plus the forecaster's, at both moments", adds(stopped) && adds(finished)],
      ];
    },
  };
}

/** Read a text/event-stream into `into` until `signal` aborts it. */
async function follow(url: string, signal: AbortSignal, into: SseEvent[]): Promise<void> {
  try {
    const response = await fetch(url, { signal });
    if (!response.ok || response.body === null) throw new Error(`GET ${url} answered ${response.status}`);
    const decoder = new TextDecoder();
    let buffer = '';
    for await (const chunk of response.body) {
      buffer += decoder.decode(chunk as Uint8Array, { stream: true });
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const fields = new Map<string, string>();
        for (const line of block.split('\n')) {
          const colon = line.indexOf(': ');
          if (line.startsWith(':') || colon < 0) continue;
          fields.set(line.slice(0, colon), line.slice(colon + 2));
        }
        const [event, id] = [fields.get('event'), fields.get('id')];
        if (event !== undefined) into.push({ ...(id === undefined ? {} : { id }), event, data: JSON.parse(fields.get('data') ?? 'null') as unknown });
      }
    }
  } catch (error) {
    if (!signal.aborted) console.log(`   the forest's event stream failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}
