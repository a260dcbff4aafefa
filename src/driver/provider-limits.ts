/**
 * The operator's limits on what the built-in driver sends each provider (AGENTFOREST_MODEL_LIMITS):
 * requests and tokens per minute, per base URL and model. An entry that names no model holds for
 * every model at that base URL, each counted on its own; an entry naming the model replaces it
 * for that model. Base URLs are normalised as `model.baseUrl` is, so both spellings meet.
 */
import { normalisedBaseUrl } from './model-policy.js';

export interface ProviderLimit {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
}

export interface ModelLimitEntry extends ProviderLimit {
  baseUrl: string;
  /** Unset: every model at `baseUrl`. */
  model?: string;
}

const KEYS = ['baseUrl', 'model', 'requestsPerMinute', 'tokensPerMinute'];

export class ModelLimits {
  /** By provider (`<baseUrl> <model>`), and by base URL for the entries that name no model. */
  private readonly byProvider = new Map<string, ProviderLimit>();
  private readonly byBaseUrl = new Map<string, ProviderLimit>();

  constructor(entries: readonly ModelLimitEntry[] = []) {
    for (const { baseUrl, model, ...limit } of entries) {
      if (model === undefined) this.byBaseUrl.set(baseUrl, limit);
      else this.byProvider.set(`${baseUrl} ${model}`, limit);
    }
  }

  /** Whether any limit is set. */
  get any(): boolean {
    return this.byProvider.size > 0 || this.byBaseUrl.size > 0;
  }

  /**
   * The limit of a provider as providerOf names it (`<baseUrl> <model>`). A normalised base URL
   * holds no space, so the first space ends it.
   */
  of(provider: string): ProviderLimit | undefined {
    return this.byProvider.get(provider) ?? this.byBaseUrl.get(provider.slice(0, provider.indexOf(' ')));
  }
}

export const NO_LIMITS = new ModelLimits();

/**
 * AGENTFOREST_MODEL_LIMITS: `[{"baseUrl": "...", "model": "...", "requestsPerMinute": n, "tokensPerMinute": n}, ...]`.
 * Throws a readable Error (the caller names the variable).
 */
export function parseModelLimits(text: string): ModelLimits {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new Error(`is not JSON (${error instanceof Error ? error.message : String(error)})`);
  }
  if (!Array.isArray(parsed)) throw new Error('must be a JSON array of limits, each {"baseUrl": ..., "model": ... (optional), "requestsPerMinute": n, "tokensPerMinute": n}');
  const seen = new Set<string>();
  const entries = parsed.map((value: unknown, i): ModelLimitEntry => {
    const at = `[${i}]`;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error(`${at} must be an object`);
    const entry = value as Record<string, unknown>;
    const unknown = Object.keys(entry).filter((k) => !KEYS.includes(k));
    if (unknown.length > 0) throw new Error(`${at} has unknown field(s) ${unknown.join(', ')}; known: ${KEYS.join(', ')}`);
    if (typeof entry.baseUrl !== 'string') throw new Error(`${at}.baseUrl must be a URL`);
    let baseUrl: string;
    try {
      baseUrl = normalisedBaseUrl(entry.baseUrl, `${at}.baseUrl`);
    } catch (error) {
      throw new Error(error instanceof Error ? error.message : String(error));
    }
    if (entry.model !== undefined && (typeof entry.model !== 'string' || entry.model === '')) throw new Error(`${at}.model must be a model name (omit it for every model at the base URL)`);
    for (const key of ['requestsPerMinute', 'tokensPerMinute'] as const) {
      const n = entry[key];
      if (n !== undefined && !(typeof n === 'number' && Number.isSafeInteger(n) && n >= 1)) throw new Error(`${at}.${key} must be a whole number of at least 1`);
    }
    if (entry.requestsPerMinute === undefined && entry.tokensPerMinute === undefined) throw new Error(`${at} sets neither requestsPerMinute nor tokensPerMinute`);
    const model = entry.model as string | undefined;
    const key = model === undefined ? baseUrl : `${baseUrl} ${model}`;
    if (seen.has(key)) throw new Error(`${at} repeats the limit of ${model === undefined ? `every model at ${baseUrl}` : `${baseUrl} ${model}`}`);
    seen.add(key);
    return {
      baseUrl,
      ...(model === undefined ? {} : { model }),
      ...(entry.requestsPerMinute === undefined ? {} : { requestsPerMinute: entry.requestsPerMinute as number }),
      ...(entry.tokensPerMinute === undefined ? {} : { tokensPerMinute: entry.tokensPerMinute as number }),
    };
  });
  return new ModelLimits(entries);
}
