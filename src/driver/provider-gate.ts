/**
 * Whether a provider (`<baseUrl> <model>`) may be sent a request now, for every agent of this
 * instance: not while it is in back-off (provider-backoff.ts), nor while its window of
 * AGENTFOREST_MODEL_LIMITS is full (provider-windows.ts: requests when sent, tokens from each
 * answer's usage, in fixed UTC minutes). Two places ask it, each in the synchronous span that acts:
 * - the driver lane's gate (`admit`), before it hands a driven agent its step: the step is
 *   admitted when one of its model's providers is open, and a place in that provider's window
 *   is held for it until its request is sent (or the minute ends); with every provider held,
 *   the step waits unclaimed until the first one opens.
 * - chat-completions (`send`), just before each request: a provider that is held is skipped as
 *   one in back-off is (the next fallback is asked, or the soonest end waited for); an open one
 *   counts the request as sent.
 * The other instances learn of it through the store (provider-sharing.ts), and it of theirs.
 */
import type { ProviderBackoffRow, ProviderLimitRow, ProviderUsageRow } from '../sessions/provider-limit-rows.js';
import { windowEnd } from '../tenants/usage-windows.js';
import { ProviderBackoff, type Backoff } from './provider-backoff.js';
import type { ModelLimits } from './provider-limits.js';
import { ProviderWindows } from './provider-windows.js';

/** What chat-completions asks of the providers of a request (ChatRequest.backoff). */
export interface ProviderRequests {
  /** Just before a request to `provider`: undefined when it may go (it is counted as sent), else what holds it and for how long. */
  send(provider: string): { answer: string; waitMs: number } | undefined;
  /** The provider asked to be left alone for `waitMs` (a 429 or 503 with Retry-After), answering `answer`. */
  note(provider: string, waitMs: number, answer: string): void;
  /** The provider answered, spending `tokens` (its usage's totalTokens). */
  spent(provider: string, tokens: number): void;
}

export interface ProviderGateDeps {
  now: () => number;
  limits: ModelLimits;
  /** A provider asked for a back-off here (each time; back-offs learnt from the store are not told). */
  noted?: (provider: string, backoff: Backoff, waitMs: number) => void;
}

export class ProviderGate implements ProviderRequests {
  private readonly backoff: ProviderBackoff;
  private readonly windows = new ProviderWindows();
  /** Back-offs noted here since the last publication. */
  private readonly unpublished = new Map<string, ProviderBackoffRow>();

  constructor(private readonly deps: ProviderGateDeps) {
    this.backoff = new ProviderBackoff(deps.now);
  }

  now(): number {
    return this.deps.now();
  }

  /** What holds the provider now (its back-off, or its full window) and until when; undefined when it is open. */
  heldBy(provider: string): Backoff | undefined {
    return this.hold(provider, this.deps.now(), false);
  }

  /**
   * The driver lane's gate for a step of a model with these providers (the primary, then the
   * fallbacks): undefined when one is open, a place in its window then held for the step; else
   * when the first of them opens (ms since the epoch).
   */
  admit(providers: readonly string[]): number | undefined {
    const now = this.deps.now();
    let soonest: number | undefined;
    for (const provider of providers) {
      const held = this.hold(provider, now, false);
      if (held === undefined) {
        if (this.deps.limits.of(provider)?.requestsPerMinute !== undefined) this.windows.hold(provider, now);
        return undefined;
      }
      soonest = Math.min(soonest ?? Infinity, held.until);
    }
    return soonest;
  }

  send(provider: string): { answer: string; waitMs: number } | undefined {
    const now = this.deps.now();
    const held = this.hold(provider, now, this.windows.hasPlace(provider, now));
    if (held !== undefined) return { answer: held.answer, waitMs: held.until - now };
    if (this.deps.limits.of(provider) !== undefined) this.windows.sent(provider, now);
    return undefined;
  }

  note(provider: string, waitMs: number, answer: string): void {
    const now = this.deps.now();
    const backoff = { until: now + waitMs, answer };
    if (this.backoff.note(provider, backoff)) this.unpublished.set(provider, { kind: 'backoff', provider, ...backoff, notedAt: now });
    this.deps.noted?.(provider, backoff, waitMs);
  }

  spent(provider: string, tokens: number): void {
    if (this.deps.limits.of(provider) !== undefined) this.windows.spent(provider, tokens, this.deps.now());
  }

  /** Whether sharing matters now: limits are set, a back-off is in force, or a back-off is to be published. */
  get active(): boolean {
    return this.deps.limits.any || this.unpublished.size > 0 || this.backoff.any();
  }

  /**
   * What to publish: the back-offs noted here since the last call and this instance's counts
   * that changed; with `all`, every back-off in force and every count (after a failed publication).
   */
  rowsToPublish(instanceId: string, all = false): ProviderLimitRow[] {
    const now = this.deps.now();
    const backoffs = all ? this.backoff.inForce().map(([provider, b]): ProviderBackoffRow => ({ kind: 'backoff', provider, ...b, notedAt: now })) : [...this.unpublished.values()];
    this.unpublished.clear();
    return [...backoffs, ...this.windows.rowsToPublish(instanceId, now, all)];
  }

  /** Back-offs the store holds (another instance's, or this one's before a restart). */
  absorbBackoffs(rows: readonly ProviderBackoffRow[]): void {
    for (const row of rows) this.backoff.note(row.provider, { until: row.until, answer: row.answer });
  }

  /** The other instances' counts of the current minute, as the store holds them now (`own`: at the start, this id's too). */
  absorbUsage(rows: readonly ProviderUsageRow[], instanceId: string, own = false): void {
    this.windows.absorb(rows, instanceId, this.deps.now(), own);
  }

  /** `placed`: a place in the window is held for this request (the lane admitted its step). */
  private hold(provider: string, now: number, placed: boolean): Backoff | undefined {
    const backoff = this.backoff.of(provider);
    if (backoff !== undefined) return backoff;
    const limit = this.deps.limits.of(provider);
    if (limit === undefined) return undefined;
    const used = this.windows.used(provider, now);
    const { requestsPerMinute: requests, tokensPerMinute: tokens } = limit;
    if (tokens !== undefined && used.tokens >= tokens) {
      return { until: windowEnd('minute', now), answer: `${provider} spent its ${tokens} tokens per minute (AGENTFOREST_MODEL_LIMITS)` };
    }
    if (requests !== undefined && !placed && used.requests >= requests) {
      return { until: windowEnd('minute', now), answer: `${provider} was sent its ${requests} requests per minute (AGENTFOREST_MODEL_LIMITS)` };
    }
    return undefined;
  }
}
