/**
 * Providers (a base URL and a model) that asked to be left alone: a 429 or 503 with
 * `Retry-After` (seconds or an HTTP date) or `retry-after-ms` puts the provider in back-off until
 * then, for every agent of this instance and, through the store, of every instance
 * (provider-sharing.ts). While it lasts no request goes to it: a model goes to its first
 * fallback that is not in back-off, and with none it waits for the earliest back-off to end, or
 * fails the step's attempt when that is further away than the longest wait allowed
 * (AGENTFOREST_MODEL_MAX_BACKOFF_MS), with the provider's answer in the error.
 */
export interface Backoff {
  /** When the back-off ends (ms since the epoch). */
  until: number;
  /** What the provider answered, for the error of a step that cannot wait that long. */
  answer: string;
}

export class ProviderBackoff {
  private readonly providers = new Map<string, Backoff>();

  constructor(private readonly now: () => number = () => Date.now()) {}

  /**
   * The provider asked to be left alone until `until` (a later end of an earlier back-off
   * stands); answers whether this one stands now.
   */
  note(provider: string, backoff: Backoff): boolean {
    const known = this.of(provider);
    if (backoff.until <= this.now() || (known !== undefined && known.until >= backoff.until)) return false;
    this.providers.set(provider, backoff);
    return true;
  }

  /** The provider's back-off, while it lasts. */
  of(provider: string): Backoff | undefined {
    const backoff = this.providers.get(provider);
    if (backoff === undefined) return undefined;
    if (backoff.until > this.now()) return backoff;
    this.providers.delete(provider);
    return undefined;
  }

  /** Every back-off in force now, by provider. */
  inForce(): [string, Backoff][] {
    return [...this.providers.keys()].flatMap((provider) => {
      const backoff = this.of(provider);
      return backoff === undefined ? [] : [[provider, backoff] as [string, Backoff]];
    });
  }

  /** Whether any provider is in back-off now. */
  any(): boolean {
    return this.inForce().length > 0;
  }
}

/** A provider as back-off and the metrics know it: `<baseUrl> <model>`. */
export function providerOf(endpoint: { baseUrl: string; model: string }): string {
  return `${endpoint.baseUrl} ${endpoint.model}`;
}
