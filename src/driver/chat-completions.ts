/**
 * One model request to an OpenAI-compatible chat-completions endpoint, with the service's
 * retry policy: 429, 5xx and connection failures are retried with exponential backoff (and
 * `Retry-After` when the endpoint sends one), all within one deadline per step. Whatever goes
 * wrong ends as a ModelRequestError whose message can be written to a session as is: it names
 * the endpoint's status and its own error text, never the API key; the status is on the error
 * too.
 *
 * With fallbacks (several endpoints): a request that answers 429 or 5xx, times out or cannot
 * connect goes on to the next endpoint at once; after the last, the backoff, then the primary
 * again (a retry is one more pass over them all). Each attempt then has its share of the step's
 * deadline (`timeoutMs` / endpoints), so a hanging endpoint leaves the others time. Any other
 * 4xx, a redirect, or an answer (whatever it says) ends the request on that endpoint.
 */
import { Buffer } from 'node:buffer';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChatMessage, ChatTool } from '../domain/step-render.js';
import type { TokenUsage } from '../domain/model.js';
import { providerOf, type ProviderBackoff } from './provider-backoff.js';

export interface RetryPolicy {
  /** Retries after the first attempt, for 429, 5xx and connection failures. */
  retries: number;
  /** The first backoff; each retry doubles it, up to maxBackoffMs. */
  backoffMs: number;
  maxBackoffMs: number;
  /** The whole step, retries and backoff included, must finish within this. */
  timeoutMs: number;
  /** The longest a provider's back-off is waited for; past it the step's attempt fails (default 10 minutes). */
  maxProviderBackoffMs?: number;
}

export const DEFAULT_MAX_PROVIDER_BACKOFF_MS = 600_000;

/** Where a request may go: the model's primary endpoint, or one of its fallbacks. */
export interface ChatEndpoint {
  baseUrl: string;
  apiKey?: string;
  model: string;
}

/** How one attempt ended, as the metrics count it per endpoint. */
export const ATTEMPT_OUTCOMES = ['ok', '429', '5xx', '4xx', 'timeout', 'unreachable', 'invalid'] as const;
export type AttemptOutcome = (typeof ATTEMPT_OUTCOMES)[number];

export interface ChatRequest {
  /** The primary first, then the fallbacks in order. */
  endpoints: ChatEndpoint[];
  /** Told how each attempt ended, and whether it fell over to the next endpoint. */
  onAttempt?: (endpoint: ChatEndpoint, outcome: AttemptOutcome, fellOver: boolean) => void;
  /** The providers in back-off, shared by every request of the instance. */
  backoff?: ProviderBackoff;
  messages: ChatMessage[];
  tools: ChatTool[];
  temperature?: number;
}

export interface RawToolCall {
  id: string | undefined;
  name: string;
  /** The JSON text the model wrote, not yet parsed. */
  arguments: string;
}

export interface ChatAnswer {
  content: string | null;
  toolCalls: RawToolCall[];
  usage?: TokenUsage;
  attempts: number;
  /** The model that answered (a fallback's when the primary failed over). */
  model: string;
  /** Requests that failed over to the next endpoint before this answer. */
  fallovers: number;
}

export class ModelRequestError extends Error {
  override readonly name = 'ModelRequestError';
  constructor(
    message: string,
    /** Requests sent before giving up. */
    readonly attempts = 1,
    /** The HTTP status of the endpoint's last answer; absent when none came (a network failure, a timeout). */
    readonly status?: number,
  ) {
    super(message);
  }
}

/** As for a backend's output (POST .../output): tool calls in one answer. */
export const MAX_TOOL_CALLS = 128;

/** The largest answer read from an endpoint; anything bigger fails the step. */
export const MAX_ANSWER_BYTES = 8 * 1024 * 1024;

/** The step was cancelled (its agent was disposed or stopped): nothing is to be recorded. */
export class ModelRequestCancelled extends Error {
  override readonly name = 'ModelRequestCancelled';
}

type Fetch = typeof fetch;

/** `<baseUrl>/chat/completions`, from the parsed (normalised) base URL. */
export function completionsUrl(baseUrl: string): string {
  const base = new URL(baseUrl);
  base.pathname = `${base.pathname.replace(/\/+$/, '')}/chat/completions`;
  return base.href;
}

export async function completeChat(request: ChatRequest, policy: RetryPolicy, cancel: AbortSignal, fetchImpl: Fetch = fetch): Promise<ChatAnswer> {
  const endpoints = request.endpoints;
  const keys = endpoints.map((e) => e.apiKey).filter((k): k is string => k !== undefined && k !== '');
  // An endpoint may quote the key it was sent (`Incorrect API key provided: sk-...`), and what
  // it answers goes into a session: no key ever does.
  const redact = (text: string): string => keys.reduce((t, key) => (t.includes(key) ? t.split(key).join('[redacted]') : t), text);
  // With fallbacks each attempt has its share of the step's deadline: a hanging endpoint leaves the others time.
  const attemptMs = endpoints.length > 1 ? Math.max(1, Math.floor(policy.timeoutMs / endpoints.length)) : undefined;

  // One controller per step, aborted by the deadline or by the caller's cancel signal (whose
  // listener is removed again: the caller's signal lives as long as its agent's loop).
  const step = new AbortController();
  const signal = step.signal;
  let expired = false;
  const timer = setTimeout(() => {
    expired = true;
    step.abort();
  }, policy.timeoutMs);
  const onCancel = (): void => step.abort();
  cancel.addEventListener('abort', onCancel, { once: true });
  if (cancel.aborted) step.abort();
  const timedOut = (url: string, attempts: number): ModelRequestError =>
    new ModelRequestError(`no answer from ${url} within ${policy.timeoutMs} ms (${attempts} attempt${attempts === 1 ? '' : 's'})`, attempts);
  try {
    let attempts = 0;
    let fallovers = 0;
    // Passes that asked something: a pass over providers all in back-off only waits, and is no retry.
    let round = 0;
    for (;;) {
      const attemptsBefore = attempts;
      let failure: Failure | undefined;
      /** The failure of this pass that asked for the shortest wait, if any did. */
      let soonest: Failure | undefined;
      for (const [index, endpoint] of endpoints.entries()) {
        const url = completionsUrl(endpoint.baseUrl);
        // A provider in back-off is not asked: the next endpoint is, as after its own 429.
        const held = request.backoff?.of(providerOf(endpoint));
        if (held !== undefined) {
          failure = { message: held.answer, outcome: '429', retryable: true, retryAfterMs: held.until - Date.now() };
          if (soonest === undefined || failure.retryAfterMs! < soonest.retryAfterMs!) soonest = failure;
          if (index < endpoints.length - 1) fallovers++;
          continue;
        }
        attempts++;
        const outcome = await attempt({ endpoint, url, request, step: signal, attemptMs, fetchImpl, attempts, redact }).catch((error: unknown) => {
          if (cancel.aborted) throw new ModelRequestCancelled('the model request was cancelled');
          request.onAttempt?.(endpoint, expired ? 'timeout' : 'invalid', false);
          if (expired) throw timedOut(url, attempts);
          throw error;
        });
        if ('answer' in outcome) {
          request.onAttempt?.(endpoint, 'ok', false);
          return { ...outcome.answer, attempts, model: endpoint.model, fallovers };
        }
        failure = { ...outcome.failure, message: redact(outcome.failure.message) };
        if (failure.retryAfterMs !== undefined && (failure.status === 429 || failure.status === 503)) {
          request.backoff?.note(providerOf(endpoint), { until: Date.now() + failure.retryAfterMs, answer: failure.message });
        }
        if (failure.retryAfterMs !== undefined && (soonest === undefined || failure.retryAfterMs < soonest.retryAfterMs!)) soonest = failure;
        const fellOver = failure.retryable && index < endpoints.length - 1;
        request.onAttempt?.(endpoint, failure.outcome, fellOver);
        if (!failure.retryable) throw new ModelRequestError(failure.message, attempts, failure.status);
        if (fellOver) fallovers++;
      }
      failure = failure!;
      // Every endpoint failed. The soonest any of them asked to be asked again is the wait, unless
      // that is longer than the longest wait allowed: then no sleep that long, the attempt fails.
      const maxWait = policy.maxProviderBackoffMs ?? DEFAULT_MAX_PROVIDER_BACKOFF_MS;
      if (soonest !== undefined && soonest.retryAfterMs! > maxWait) {
        throw new ModelRequestError(
          `${soonest.message}; it asked to wait ${Math.ceil(soonest.retryAfterMs! / 1000)} s, more than the ${maxWait} ms allowed (AGENTFOREST_MODEL_MAX_BACKOFF_MS)`,
          attempts,
          soonest.status,
        );
      }
      if (attempts > attemptsBefore && round++ >= policy.retries) {
        throw new ModelRequestError(`${failure.message} (gave up after ${attempts} attempt${attempts === 1 ? '' : 's'})`, attempts, failure.status);
      }
      const backoff = Math.min(policy.maxBackoffMs, policy.backoffMs * 2 ** Math.max(0, round - 1));
      const wait = soonest?.retryAfterMs ?? backoff * (0.5 + Math.random() * 0.5);
      try {
        await sleep(wait, undefined, { signal });
      } catch {
        if (cancel.aborted) throw new ModelRequestCancelled('the model request was cancelled');
        throw new ModelRequestError(`${failure.message}; the ${policy.timeoutMs} ms step timeout ran out before attempt ${attempts + 1}`, attempts, failure.status);
      }
    }
  } finally {
    clearTimeout(timer);
    cancel.removeEventListener('abort', onCancel);
  }
}

/** Why an attempt failed; `retryable`: 429, 5xx, no connection or an attempt's timeout (the next endpoint, or a retry). */
interface Failure {
  message: string;
  outcome: Exclude<AttemptOutcome, 'ok' | 'invalid'>;
  retryable: boolean;
  retryAfterMs?: number;
  status?: number;
}

/**
 * One request to one endpoint: its answer, or why it failed. Throws a ModelRequestError for a
 * failure no other endpoint may mend (a redirect, an answer that is no chat completion), and
 * rethrows when the step's own signal ended it (the caller tells the deadline from a cancel).
 */
async function attempt(a: {
  endpoint: ChatEndpoint;
  url: string;
  request: ChatRequest;
  /** The step's signal (its deadline, or a cancel). */
  step: AbortSignal;
  /** This attempt's own bound, with fallbacks. */
  attemptMs: number | undefined;
  fetchImpl: Fetch;
  attempts: number;
  redact: (text: string) => string;
}): Promise<{ answer: Omit<ChatAnswer, 'attempts' | 'model' | 'fallovers'> } | { failure: Failure }> {
  const { endpoint, url, request, step, attemptMs, fetchImpl, attempts } = a;
  const body: Record<string, unknown> = { model: endpoint.model, messages: request.messages };
  if (request.tools.length > 0) body.tools = request.tools;
  if (request.temperature !== undefined) body.temperature = request.temperature;
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
  if (endpoint.apiKey !== undefined) headers.authorization = `Bearer ${endpoint.apiKey}`;
  const own = attemptMs === undefined ? undefined : AbortSignal.timeout(attemptMs);
  const signal = own === undefined ? step : AbortSignal.any([step, own]);
  try {
    // A redirect would re-send the conversation to a URL no policy checked: not followed.
    const response = await fetchImpl(url, { method: 'POST', headers, body: JSON.stringify(body), signal, redirect: 'manual' });
    if (response.status >= 300 && response.status < 400) {
      await response.body?.cancel().catch(() => undefined);
      throw new ModelRequestError(`${url} answered ${response.status}, a redirect; redirects are not followed: set model.baseUrl to the endpoint itself`, attempts, response.status);
    }
    const text = a.redact(await readLimited(response, url, attempts));
    if (response.ok) return { answer: parseCompletion(url, text, attempts, response.status) };
    const outcome = response.status === 429 ? '429' : response.status >= 500 ? '5xx' : '4xx';
    const failure: Failure = { message: `${url} answered ${response.status}${errorText(text)}`, outcome, retryable: outcome !== '4xx', status: response.status };
    const retryAfter = retryAfterMs(response.headers.get('retry-after-ms'), response.headers.get('retry-after'));
    if (retryAfter !== undefined) failure.retryAfterMs = retryAfter;
    return { failure };
  } catch (error) {
    if (step.aborted) throw error;
    if (own?.aborted === true) return { failure: { message: `no answer from ${url} within ${attemptMs} ms, its share of the step's timeout`, outcome: 'timeout', retryable: true } };
    if (error instanceof ModelRequestError) throw error;
    return { failure: { message: `could not reach ${url}: ${networkReason(error)}`, outcome: 'unreachable', retryable: true } };
  }
}

/** The body as text, refusing (without reading on) one larger than MAX_ANSWER_BYTES. */
async function readLimited(response: Response, url: string, attempts: number): Promise<string> {
  if (response.body === null) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_ANSWER_BYTES) {
      await reader.cancel().catch(() => undefined);
      throw new ModelRequestError(`the answer of ${url} is larger than ${MAX_ANSWER_BYTES} bytes`, attempts, response.status);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The first choice's message of a chat completion, or a ModelRequestError saying what is wrong with it. */
function parseCompletion(url: string, text: string, attempts: number, status: number): Omit<ChatAnswer, 'attempts' | 'model' | 'fallovers'> {
  const invalid = (why: string): ModelRequestError => new ModelRequestError(`the answer of ${url} is not a chat completion: ${why}`, attempts, status);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw invalid(`not JSON (${excerpt(text)})`);
  }
  const choice = isRecord(parsed) && Array.isArray(parsed.choices) ? (parsed.choices[0] as unknown) : undefined;
  if (!isRecord(choice) || !isRecord(choice.message)) throw invalid('it has no choices[0].message');
  const message = choice.message;
  const rawCalls = message.tool_calls ?? [];
  if (!Array.isArray(rawCalls)) throw invalid('message.tool_calls is not a list');
  if (rawCalls.length > MAX_TOOL_CALLS) throw invalid(`it has ${rawCalls.length} tool calls; at most ${MAX_TOOL_CALLS} are accepted in one answer`);
  const toolCalls = rawCalls.map((call: unknown, i): RawToolCall => {
    const fn = isRecord(call) ? call.function : undefined;
    if (!isRecord(call) || !isRecord(fn) || typeof fn.name !== 'string') throw invalid(`tool_calls[${i}] has no function name`);
    const args = fn.arguments;
    return {
      id: typeof call.id === 'string' && call.id !== '' ? call.id : undefined,
      name: fn.name,
      arguments: typeof args === 'string' ? args : args === undefined ? '' : JSON.stringify(args),
    };
  });
  const answer: Omit<ChatAnswer, 'attempts' | 'model' | 'fallovers'> = { content: contentText(message.content), toolCalls };
  const usage = isRecord(parsed) ? usageOf(parsed.usage) : undefined;
  if (usage !== undefined) answer.usage = usage;
  return answer;
}

/** Text content: a string, or (some servers) a list of parts whose text parts are joined. */
function contentText(content: unknown): string | null {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    const texts = content.filter(isRecord).map((part) => part.text).filter((t): t is string => typeof t === 'string');
    return texts.length === 0 ? null : texts.join('');
  }
  return null;
}

function usageOf(usage: unknown): TokenUsage | undefined {
  if (!isRecord(usage)) return undefined;
  const n = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.round(v) : 0);
  const promptTokens = n(usage.prompt_tokens);
  const completionTokens = n(usage.completion_tokens);
  const total = n(usage.total_tokens);
  return { promptTokens, completionTokens, totalTokens: total > 0 ? total : promptTokens + completionTokens };
}

/** The endpoint's own error text: `error.message` of a JSON error body, else the start of the body. */
function errorText(text: string): string {
  if (text.trim() === '') return '';
  try {
    const parsed: unknown = JSON.parse(text);
    if (isRecord(parsed) && isRecord(parsed.error) && typeof parsed.error.message === 'string') return `: ${excerpt(parsed.error.message)}`;
    if (isRecord(parsed) && typeof parsed.error === 'string') return `: ${excerpt(parsed.error)}`;
  } catch {
    // not JSON: show the text itself
  }
  return `: ${excerpt(text)}`;
}

function networkReason(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as Error & { cause?: unknown }).cause;
    if (isRecord(cause) && typeof cause.code === 'string') return cause.code;
    if (cause instanceof Error) return cause.message;
    return error.message;
  }
  return String(error);
}

/** How long the endpoint asked to wait: `retry-after-ms`, else `Retry-After` in seconds or as an HTTP date. */
function retryAfterMs(millis: string | null, header: string | null): number | undefined {
  const fromMillis = millis === null || millis.trim() === '' ? Number.NaN : Number(millis);
  if (Number.isFinite(fromMillis) && fromMillis >= 0) return fromMillis;
  if (header === null || header.trim() === '') return undefined;
  const seconds = Number(header);
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(header) - Date.now();
  return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
}

function excerpt(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > 300 ? `${flat.slice(0, 300)}…` : flat;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
