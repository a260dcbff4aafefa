/**
 * What the built-in driver sent each limited provider in the current UTC minute, on every
 * instance as far as this one knows: its own counts (a request when it is sent, the tokens of
 * each answer's usage), the places held for steps the driver lane admitted and has not sent
 * yet, and what the other instances last published (provider usage rows in the store). Fixed
 * one-minute windows, as the tenants' stepsPerMinute: everything counts zero when the minute
 * turns. Time comes in as an argument; nothing here waits.
 */
import type { ProviderUsageRow } from '../sessions/provider-limit-rows.js';
import { MINUTE_MS, minuteOf } from '../tenants/usage-windows.js';

/**
 * How long into a minute an instance that sent a provider requests in the last one may not
 * have published what it sent in this one yet (each publishes every half second): until then,
 * a read that finds its row still of the last minute has not heard it.
 */
export const NEW_MINUTE_HEARD_MS = 1_000;

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
  /** The other instances that sent each provider requests in this minute or the last (as last read). */
  private peers = new Map<string, number>();
  /** The minute of the last read of the others' rows. */
  private heard = -1;

  /** Requests (places held included) and tokens of the provider in the current minute, every instance's. */
  used(provider: string, nowMs: number): Used {
    const minute = minuteOf(nowMs);
    const mine = inMinute(this.local.get(provider), minute);
    const theirs = inMinute(this.others.get(provider), minute);
    return { requests: mine.requests + theirs.requests + this.placesOf(provider, minute), tokens: mine.tokens + theirs.tokens };
  }

  /**
   * How many instances share the provider's requests until this one has read the others' rows
   * of the current minute: 1 once it has (their counts are in `used`), else itself and the
   * others that sent the provider requests lately. At a minute's turn each instance then takes
   * only its share of the new window until it hears what the others sent, instead of every
   * instance taking all of it at once.
   */
  sharedBy(provider: string, nowMs: number): number {
    return this.heard === minuteOf(nowMs) ? 1 : 1 + (this.peers.get(provider) ?? 0);
  }

  /** Hold a place in the current minute for a step the driver lane admitted (until sent or unheld; it lapses with the minute). */
  hold(provider: string, nowMs: number): void {
    const minute = minuteOf(nowMs);
    this.places.set(provider, { minute, count: this.placesOf(provider, minute) + 1 });
  }

  /** A place held in the current minute is not needed any more (its step ended without a request). */
  unhold(provider: string, nowMs: number): void {
    const minute = minuteOf(nowMs);
    const places = this.placesOf(provider, minute);
    if (places > 0) this.places.set(provider, { minute, count: places - 1 });
  }

  /** Count a request sent now; `placed`: it takes the place held for its step. */
  sent(provider: string, nowMs: number, placed: boolean): void {
    if (placed) this.unhold(provider, nowMs);
    this.add(provider, minuteOf(nowMs), 1, 0);
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
   * `instanceId`'s), and which of them sent requests in this minute or the last. The others
   * are heard once none of those that sent in the last minute may still be about to publish
   * this one's counts (NEW_MINUTE_HEARD_MS). With `own` (at the start), this instance's rows
   * are its predecessor's under the same id: their counts are taken as its own.
   */
  absorb(rows: readonly ProviderUsageRow[], instanceId: string, nowMs: number, own = false): void {
    const minute = minuteOf(nowMs);
    const others = new Map<string, Window>();
    const peers = new Map<string, number>();
    const key = (row: ProviderUsageRow): string => `${row.instanceId}\n${row.provider}`;
    const current = new Set(rows.filter((row) => row.minute === minute).map(key));
    const unheard = rows.some((row) => row.instanceId !== instanceId && row.minute === minute - 1 && !current.has(key(row)));
    for (const row of rows) {
      if (row.minute < minute - 1) continue;
      if (row.instanceId === instanceId) {
        if (own && row.minute === minute) this.add(row.provider, minute, row.requests, row.tokens);
        continue;
      }
      peers.set(row.provider, (peers.get(row.provider) ?? 0) + 1);
      if (row.minute !== minute) continue;
      const sum = inMinute(others.get(row.provider), minute);
      others.set(row.provider, { minute, requests: sum.requests + row.requests, tokens: sum.tokens + row.tokens });
    }
    this.others = others;
    this.peers = peers;
    if (!unheard || nowMs - minute * MINUTE_MS >= NEW_MINUTE_HEARD_MS) this.heard = minute;
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
