/**
 * Whether a provider (`<baseUrl> <model>`) may be sent a request now, for every agent of this
 * instance: not while it is in back-off (provider-backoff.ts), nor while its window of
 * AGENTFOREST_MODEL_LIMITS is full (provider-windows.ts: requests when sent, tokens from each
 * answer's usage, in fixed UTC minutes). Two places ask it, each in the synchronous span that acts:
 * - the driver lane's gate (`admit`), before it hands a driven agent its step: the step is
 *   admitted when one of its model's providers is open, and a place in that provider's window
 *   is held for it until its request is sent, the step ends without one, or the minute ends;
 *   with every provider held, the step waits unclaimed until the first one opens.
 * - chat-completions (`send`), just before each request: a provider that is held is skipped as
 *   one in back-off is (the next fallback is asked, or the soonest end waited for); an open one
 *   counts the request as sent.
 * The other instances learn of it through the store (provider-sharing.ts), and it of theirs.
 */
import type { ProviderBackoffRow, ProviderLimitRow, ProviderUsageRow } from '../sessions/provider-limit-rows.js';
import { minuteOf, windowEnd } from '../tenants/usage-windows.js';
import { ProviderBackoff, type Backoff } from './provider-backoff.js';
import type { ModelLimits } from './provider-limits.js';
import { ProviderWindows } from './provider-windows.js';

/** How soon a step held for the other instances' counts is offered again (they are read every half second). */
const HEARING_MS = 250;

/**
 * A place held in a provider's window of the current minute for one admitted step: its first
 * request to that provider takes it, or the step gives it back when it ends without one.
 */
export class ProviderPlace {
  private open = true;

  constructor(
    readonly provider: string,
    /** The minute it was held in (minuteOf: minutes since the epoch); it lapses with it. */
    private readonly minute: number,
  ) {}

  /** Close the place if it is still open in `minute`; answers whether it was. */
  close(minute: number): boolean {
    const was = this.open && minute === this.minute;
    this.open = false;
    return was;
  }
}

/** What chat-completions asks of the providers of a request (ChatRequest.providers). */
export interface ProviderRequests {
  /**
   * Just before a request to `provider`: undefined when it may go (it is counted as sent,
   * taking `place` when that was held for this provider), else what holds it and for how long.
   */
  send(provider: string, place?: ProviderPlace): { answer: string; waitMs: number } | undefined;
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

  /** The provider's back-off, while it lasts (what it asked; not its window). */
  backoffOf(provider: string): Backoff | undefined {
    return this.backoff.of(provider);
  }

  /** What holds the provider now (its back-off, or its full window) and until when; undefined when it is open. */
  heldBy(provider: string): Backoff | undefined {
    return this.hold(provider, this.deps.now(), false);
  }

  /**
   * The driver lane's gate for a step of a model with these providers (the primary, then the
   * fallbacks): when one is open, a place in its window held for the step (none where it has no
   * request limit); else when the first of them opens (ms since the epoch).
   */
  admit(providers: readonly string[]): { place: ProviderPlace | undefined } | { until: number } {
    const now = this.deps.now();
    let soonest = Infinity;
    for (const provider of providers) {
      const held = this.hold(provider, now, false);
      if (held === undefined) {
        if (this.deps.limits.of(provider)?.requestsPerMinute === undefined) return { place: undefined };
        this.windows.hold(provider, now);
        return { place: new ProviderPlace(provider, minuteOf(now)) };
      }
      soonest = Math.min(soonest, held.until);
    }
    return { until: soonest };
  }

  send(provider: string, place?: ProviderPlace): { answer: string; waitMs: number } | undefined {
    const now = this.deps.now();
    const placed = place?.provider === provider && place.close(minuteOf(now));
    const held = this.hold(provider, now, placed);
    if (held !== undefined) {
      if (placed) this.windows.unhold(provider, now);
      return { answer: held.answer, waitMs: held.until - now };
    }
    if (this.deps.limits.of(provider) !== undefined) this.windows.sent(provider, now, placed);
    return undefined;
  }

  /** The step the place was held for ended: a place its request did not take is free again. */
  release(place: ProviderPlace): void {
    const now = this.deps.now();
    if (place.close(minuteOf(now))) this.windows.unhold(place.provider, now);
  }

  note(provider: string, waitMs: number, answer: string): void {
    const now = this.deps.now();
    const backoff = { until: now + waitMs, answer };
    // Only a back-off that stands (none longer was in force) is published and counted.
    if (!this.backoff.note(provider, backoff)) return;
    this.unpublished.set(provider, { kind: 'backoff', provider, ...backoff, notedAt: now });
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
    // Not yet heard what the other instances sent this minute: only this instance's share of it.
    const sharedBy = this.windows.sharedBy(provider, now);
    if (requests !== undefined && !placed && sharedBy > 1 && used.requests >= Math.floor(requests / sharedBy)) {
      return { until: now + HEARING_MS, answer: `${provider} was sent this instance's share of its ${requests} requests per minute until it hears the other instances' counts (AGENTFOREST_MODEL_LIMITS)` };
    }
    return undefined;
  }
}
