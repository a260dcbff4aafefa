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
 * deadline (`timeoutMs` / endpoints) to answer (a stream: to send its first piece), so a
 * hanging endpoint leaves the others time. Any other
 * 4xx, a redirect, or an answer (whatever it says) ends the request on that endpoint.
 *
 * Streaming: a request may ask for `stream: true`; its answer's pieces are handed on as they
 * arrive (chat-answer.ts assembles them into the answer a JSON completion would have been). A
 * stream that breaks off or reports an error midway fails that attempt like a 5xx (the next
 * endpoint, or a retry), whose first piece then says `reset`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChatMessage, ChatTool } from '../domain/step-render.js';
import { providerOf } from './provider-backoff.js';
import type { ProviderPlace, ProviderRequests } from './provider-gate.js';
import { errorText, isEventStream, isRecord, ModelRequestError, parseCompletion, piecesOf, readLimited, readStream, StreamBroken, type AnswerPiece, type ParsedAnswer } from './chat-answer.js';
import { KeyRedaction } from './key-redaction.js';

export { MAX_ANSWER_BYTES, MAX_TOOL_CALLS, ModelRequestError, type AnswerPiece, type RawToolCall } from './chat-answer.js';

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

/** The longest wait a provider may ask for and be waited for (AGENTFOREST_MODEL_MAX_BACKOFF_MS). */
export function maxWaitOf(policy: Pick<RetryPolicy, 'maxProviderBackoffMs'>): number {
  return policy.maxProviderBackoffMs ?? DEFAULT_MAX_PROVIDER_BACKOFF_MS;
}

/**
 * Why a wait longer than maxWaitOf is not waited, with what the provider answered: the request
 * that meets it fails its attempt with this, the driver lane's gate the turn.
 */
export function waitTooLong(answer: string, waitMs: number, maxWait: number): string {
  return `${answer}; it asked to wait ${Math.ceil(waitMs / 1000)} s, more than the ${maxWait} ms allowed (AGENTFOREST_MODEL_MAX_BACKOFF_MS)`;
}

/** Where a request may go: the model's primary endpoint, or one of its fallbacks. */
export interface ChatEndpoint {
  baseUrl: string;
  apiKey?: string;
  model: string;
}

/**
 * How one attempt ended, as the metrics count it per endpoint; `fallback`: the request was not
 * sent to this provider (in back-off, or at its limit) and went on to the next model.
 */
export const ATTEMPT_OUTCOMES = ['ok', '429', '5xx', '4xx', 'timeout', 'unreachable', 'invalid', 'fallback'] as const;
export type AttemptOutcome = (typeof ATTEMPT_OUTCOMES)[number];

export interface ChatRequest {
  /** The primary first, then the fallbacks in order. */
  endpoints: ChatEndpoint[];
  /** Told how each attempt ended, and whether it fell over to the next endpoint. */
  onAttempt?: (endpoint: ChatEndpoint, outcome: AttemptOutcome, fellOver: boolean) => void;
  /** What holds a provider (its back-off, its full window), shared by every request of the instance. */
  providers?: ProviderRequests;
  /** The place the driver lane held for this request's step in a provider's window, if any. */
  place?: ProviderPlace;
  messages: ChatMessage[];
  tools: ChatTool[];
  temperature?: number;
  /** Ask the endpoint to stream its answer (`stream: true`); one that answers JSON anyway is read as JSON. */
  stream?: boolean;
  /**
   * Each piece of the answer as it arrives (an endpoint answering JSON: its text, then each
   * call, at once). `reset` marks the first piece of an attempt after an earlier attempt of
   * this request had sent pieces: what they built is void.
   */
  onDelta?: (piece: AnswerPiece & { reset?: true }) => void;
  /** The first piece of an attempt arrived this long after its request was sent. */
  onFirstDelta?: (endpoint: ChatEndpoint, seconds: number) => void;
  /**
   * Every endpoint asked to wait (a back-off, a full window): told for how long before the
   * request waits it out, and `undefined` once the wait is over.
   */
  onWait?: (waitMs: number | undefined) => void;
}

export interface ChatAnswer extends ParsedAnswer {
  attempts: number;
  /** The model that answered (a fallback's when the primary failed over). */
  model: string;
  /** Its provider (`<baseUrl> <model>`). */
  provider: string;
  /** Requests that failed over to the next endpoint before this answer. */
  fallovers: number;
}

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
  // An endpoint may quote the key it was sent (`Incorrect API key provided: sk-...`), and what
  // it answers goes into a session and out on the event streams: no key ever does.
  const redaction = new KeyRedaction(endpoints.map((e) => e.apiKey));
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
  // Pieces of an answer go on as they arrive; after an attempt that sent some, the next one's
  // first piece says `reset`: what the earlier pieces built is void.
  let sentPieces = false;
  const piecesOfAttempt = (): ((piece: AnswerPiece) => void) | undefined => {
    const onDelta = request.onDelta;
    if (onDelta === undefined) return undefined;
    let reset = sentPieces;
    return (piece) => {
      sentPieces = true;
      onDelta(reset ? { ...piece, reset: true } : piece);
      reset = false;
    };
  };
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
      /** The last failure of this pass from a provider that was asked (not one held back). */
      let asked: Failure | undefined;
      /** An endpoint of this pass failed without asking for a wait: it may be asked again after the usual backoff. */
      let anyUnheld = false;
      /** Keep the failure that asks for the shortest wait. */
      const asksToWait = (f: Failure): void => {
        if (soonest === undefined || f.retryAfterMs! < soonest.retryAfterMs!) soonest = f;
      };
      for (const [index, endpoint] of endpoints.entries()) {
        const url = completionsUrl(endpoint.baseUrl);
        const provider = providerOf(endpoint);
        // A provider in back-off or at its limit is not asked: the next endpoint is, as after its own 429.
        const held = request.providers?.send(provider, request.place);
        if (held !== undefined) {
          failure = { message: held.answer, outcome: '429', retryable: true, retryAfterMs: held.waitMs };
          asksToWait(failure);
          if (index < endpoints.length - 1) {
            fallovers++;
            request.onAttempt?.(endpoint, 'fallback', true);
          }
          continue;
        }
        attempts++;
        const outcome = await attempt({ endpoint, url, request, step: signal, attemptMs, fetchImpl, attempts, redaction, onPiece: piecesOfAttempt() }).catch((error: unknown) => {
          if (cancel.aborted) throw new ModelRequestCancelled('the model request was cancelled');
          request.onAttempt?.(endpoint, expired ? 'timeout' : 'invalid', false);
          if (expired) throw timedOut(url, attempts);
          throw error;
        });
        if ('answer' in outcome) {
          request.onAttempt?.(endpoint, 'ok', false);
          request.providers?.spent(provider, outcome.answer.usage?.totalTokens ?? 0);
          return { ...outcome.answer, attempts, model: endpoint.model, provider, fallovers };
        }
        failure = { ...outcome.failure, message: redaction.text(outcome.failure.message) };
        asked = failure;
        if (failure.retryAfterMs !== undefined && (failure.status === 429 || failure.status === 503)) {
          request.providers?.note(provider, failure.retryAfterMs, failure.message);
        }
        if (failure.retryAfterMs === undefined) anyUnheld = true;
        else asksToWait(failure);
        const fellOver = failure.retryable && index < endpoints.length - 1;
        request.onAttempt?.(endpoint, failure.outcome, fellOver);
        if (!failure.retryable) throw new ModelRequestError(failure.message, attempts, failure.status);
        if (fellOver) fallovers++;
      }
      // What the request reports: the last provider asked, rather than one held back (whose
      // answer is another request's).
      failure = asked ?? failure!;
      // Every endpoint failed. One that asked for no wait is asked again after the usual backoff
      // (or sooner, when a held one opens first). When every one asked to wait, the soonest is
      // the wait, unless that is longer than the longest wait allowed: then no sleep that long,
      // the attempt fails.
      const maxWait = maxWaitOf(policy);
      if (!anyUnheld && soonest !== undefined && soonest.retryAfterMs! > maxWait) {
        throw new ModelRequestError(waitTooLong(soonest.message, soonest.retryAfterMs!, maxWait), attempts, soonest.status);
      }
      if (attempts > attemptsBefore && round++ >= policy.retries) {
        throw new ModelRequestError(`${failure.message} (gave up after ${attempts} attempt${attempts === 1 ? '' : 's'})`, attempts, failure.status);
      }
      const backoff = Math.min(policy.maxBackoffMs, policy.backoffMs * 2 ** Math.max(0, round - 1));
      const usual = backoff * (0.5 + Math.random() * 0.5);
      const wait = anyUnheld ? Math.min(usual, soonest?.retryAfterMs ?? Infinity) : soonest!.retryAfterMs!;
      if (!anyUnheld) request.onWait?.(wait);
      try {
        await sleep(wait, undefined, { signal });
      } catch {
        if (cancel.aborted) throw new ModelRequestCancelled('the model request was cancelled');
        throw new ModelRequestError(`${failure.message}; the ${policy.timeoutMs} ms step timeout ran out before attempt ${attempts + 1}`, attempts, failure.status);
      } finally {
        if (!anyUnheld) request.onWait?.(undefined);
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
  outcome: Exclude<AttemptOutcome, 'ok' | 'invalid' | 'fallback'>;
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
  redaction: KeyRedaction;
  /** Each piece of the answer as it arrives. */
  onPiece: ((piece: AnswerPiece) => void) | undefined;
}): Promise<{ answer: ParsedAnswer } | { failure: Failure }> {
  const { endpoint, url, request, step, attemptMs, fetchImpl, attempts, redaction } = a;
  const redact = redaction.text;
  const body: Record<string, unknown> = { model: endpoint.model, messages: request.messages };
  if (request.tools.length > 0) body.tools = request.tools;
  if (request.temperature !== undefined) body.temperature = request.temperature;
  if (request.stream === true) Object.assign(body, { stream: true, stream_options: { include_usage: true } });
  const accept = request.stream === true ? 'text/event-stream, application/json' : 'application/json';
  const headers: Record<string, string> = { 'content-type': 'application/json', accept };
  if (endpoint.apiKey !== undefined) headers.authorization = `Bearer ${endpoint.apiKey}`;
  // With fallbacks, the attempt's share bounds its wait for an answer: a whole JSON answer, or a
  // stream's first piece (a stream that has begun may take the rest of the step's time).
  const own = attemptMs === undefined ? undefined : new AbortController();
  const ownTimer = own === undefined ? undefined : setTimeout(() => own.abort(), attemptMs);
  const signal = own === undefined ? step : AbortSignal.any([step, own.signal]);
  const sent = performance.now();
  let first = true;
  // Published without the key, as the answer is recorded: see key-redaction.ts.
  const redacting = redaction.pieces((piece) => a.onPiece?.(piece));
  const onPiece = (piece: AnswerPiece): void => {
    if (first) {
      clearTimeout(ownTimer);
      request.onFirstDelta?.(endpoint, (performance.now() - sent) / 1000);
    }
    first = false;
    redacting.piece(piece);
  };
  try {
    // A redirect would re-send the conversation to a URL no policy checked: not followed.
    const response = await fetchImpl(url, { method: 'POST', headers, body: JSON.stringify(body), signal, redirect: 'manual' });
    if (response.status >= 300 && response.status < 400) {
      await response.body?.cancel().catch(() => undefined);
      throw new ModelRequestError(`${url} answered ${response.status}, a redirect; redirects are not followed: set model.baseUrl to the endpoint itself`, attempts, response.status);
    }
    if (response.ok && isEventStream(response)) {
      const answer = redactAnswer(await readStream(response, url, attempts, onPiece, redact), redact);
      redacting.flush();
      return { answer };
    }
    const text = redact(await readLimited(response, url, attempts));
    if (response.ok) {
      // An endpoint that answered JSON (not asked to stream, or not able to): its pieces all at once.
      const answer = parseCompletion(url, text, attempts, response.status);
      if (a.onPiece !== undefined || request.onFirstDelta !== undefined) for (const piece of piecesOf(answer)) onPiece(piece);
      redacting.flush();
      return { answer };
    }
    const outcome = response.status === 429 ? '429' : response.status >= 500 ? '5xx' : '4xx';
    const failure: Failure = { message: `${url} answered ${response.status}${errorText(text)}`, outcome, retryable: outcome !== '4xx', status: response.status };
    const retryAfter = retryAfterMs(response.headers.get('retry-after-ms'), response.headers.get('retry-after'));
    if (retryAfter !== undefined) failure.retryAfterMs = retryAfter;
    return { failure };
  } catch (error) {
    if (step.aborted) throw error;
    if (own?.signal.aborted === true) return { failure: { message: `no answer from ${url} within ${attemptMs} ms, its share of the step's timeout`, outcome: 'timeout', retryable: true } };
    if (error instanceof StreamBroken) return { failure: { message: error.message, outcome: error.outcome, retryable: true } };
    if (error instanceof ModelRequestError) throw error;
    return { failure: { message: `could not reach ${url}: ${networkReason(error)}`, outcome: 'unreachable', retryable: true } };
  } finally {
    clearTimeout(ownTimer);
  }
}

/** A streamed answer with the key taken out of what it says, as from a JSON answer's text and from its pieces. */
function redactAnswer(answer: ParsedAnswer, redact: (text: string) => string): ParsedAnswer {
  return {
    ...answer,
    content: answer.content === null ? null : redact(answer.content),
    toolCalls: answer.toolCalls.map((call) => ({ ...call, id: call.id === undefined ? undefined : redact(call.id), name: redact(call.name), arguments: redact(call.arguments) })),
  };
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
