/**
 * What the built-in driver sent each limited provider in the current UTC minute, on every
 * instance as far as this one knows: its own counts (a request when it is sent, the tokens of
 * each answer's usage), the places held for steps the driver lane admitted and has not sent
 * yet, and what the other instances last published (provider usage rows in the store). Fixed
 * one-minute windows, as the tenants' stepsPerMinute: everything counts zero when the minute
 * turns. Time comes in as an argument; nothing here waits.
 */
import type { ProviderUsageRow } from '../sessions/provider-limit-rows.js';
import { minuteOf } from '../tenants/usage-windows.js';

interface Window {
  minute: number;
  requests: number;
  tokens: number;
}

export interface Used {
  requests: number;
  tokens: number;
}

function inMinute(window: Window | undefined, minute: number): Used {
  return window === undefined || window.minute !== minute ? { requests: 0, tokens: 0 } : window;
}

export class ProviderWindows {
  /** This instance's counts, by provider. */
  private readonly local = new Map<string, Window>();
  /** Places held for admitted steps not yet sent, by provider; a place lapses with its minute. */
  private readonly places = new Map<string, { minute: number; count: number }>();
  /** The other instances' published counts, summed by provider. */
  private others = new Map<string, Window>();
  /** Providers whose counts changed since the last publication. */
  private readonly changed = new Set<string>();

  /** Requests (places held included) and tokens of the provider in the current minute, every instance's. */
  used(provider: string, nowMs: number): Used {
    const minute = minuteOf(nowMs);
    const mine = inMinute(this.local.get(provider), minute);
    const theirs = inMinute(this.others.get(provider), minute);
    return { requests: mine.requests + theirs.requests + this.placesOf(provider, minute), tokens: mine.tokens + theirs.tokens };
  }

  /** Hold a place in the current minute for a step the driver lane admitted. */
  hold(provider: string, nowMs: number): void {
    const minute = minuteOf(nowMs);
    this.places.set(provider, { minute, count: this.placesOf(provider, minute) + 1 });
  }

  /** Whether a place is held for the provider in the current minute. */
  hasPlace(provider: string, nowMs: number): boolean {
    return this.placesOf(provider, minuteOf(nowMs)) > 0;
  }

  /** Count a request sent now; it takes a place held for an admitted step, if one is. */
  sent(provider: string, nowMs: number): void {
    const minute = minuteOf(nowMs);
    const places = this.placesOf(provider, minute);
    if (places > 0) this.places.set(provider, { minute, count: places - 1 });
    this.add(provider, minute, 1, 0);
  }

  /** Count the tokens of an answer. */
  spent(provider: string, tokens: number, nowMs: number): void {
    if (tokens > 0) this.add(provider, minuteOf(nowMs), 0, tokens);
  }

  /** Whether this instance has counts of its own to publish. */
  get changes(): boolean {
    return this.changed.size > 0;
  }

  /** This instance's rows to publish: the providers whose counts changed since the last call (`all`: every one). */
  rowsToPublish(instanceId: string, nowMs: number, all = false): ProviderUsageRow[] {
    const minute = minuteOf(nowMs);
    const providers = all ? [...this.local.keys()] : [...this.changed];
    this.changed.clear();
    return providers.map((provider) => {
      const { requests, tokens } = inMinute(this.local.get(provider), minute);
      return { kind: 'usage', instanceId, provider, minute, requests, tokens, updatedAt: nowMs };
    });
  }

  /**
   * Take the other instances' rows of the current minute as they are now (every row not
   * `instanceId`'s). With `own` (at the start), this instance's rows are its predecessor's under
   * the same id: their counts are taken as its own.
   */
  absorb(rows: readonly ProviderUsageRow[], instanceId: string, nowMs: number, own = false): void {
    const minute = minuteOf(nowMs);
    const others = new Map<string, Window>();
    for (const row of rows) {
      if (row.minute !== minute) continue;
      if (row.instanceId === instanceId) {
        if (own) this.add(row.provider, minute, row.requests, row.tokens);
        continue;
      }
      const sum = inMinute(others.get(row.provider), minute);
      others.set(row.provider, { minute, requests: sum.requests + row.requests, tokens: sum.tokens + row.tokens });
    }
    this.others = others;
  }

  private placesOf(provider: string, minute: number): number {
    const places = this.places.get(provider);
    return places === undefined || places.minute !== minute ? 0 : places.count;
  }

  private add(provider: string, minute: number, requests: number, tokens: number): void {
    const counts = inMinute(this.local.get(provider), minute);
    this.local.set(provider, { minute, requests: counts.requests + requests, tokens: counts.tokens + tokens });
    this.changed.add(provider);
  }
}
