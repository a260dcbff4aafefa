/**
 * A model an agent is driven by: when an agent's session header names one, the service runs
 * its step loop itself against that chat-completions endpoint instead of handing steps to a
 * backend. The header keeps only where to find the key (an environment variable's name),
 * never the key.
 */
export const MODEL_PROVIDERS = ['openai-compatible'] as const;
export type ModelProvider = (typeof MODEL_PROVIDERS)[number];

export interface ModelSpec {
  provider: ModelProvider;
  /** The API root, e.g. `https://api.openai.com/v1`; requests go to `<baseUrl>/chat/completions`. */
  baseUrl: string;
  model: string;
  /** The name of the service's environment variable that holds the API key. */
  apiKeyEnv?: string;
  temperature?: number;
  /** Model requests one turn may make before it fails (default DEFAULT_MAX_STEPS). */
  maxSteps?: number;
  /**
   * The most estimated tokens (about 4 bytes of JSON each) a step may send. Past it the driver
   * summarises the older part of the conversation with the same model and writes a compaction
   * entry before sending the step; absent: it never compacts on its own.
   */
  maxContextTokens?: number;
  /**
   * Models tried in order when a request to the one before answers 429 or 5xx, times out, or
   * cannot connect (never on another 4xx or on an answer, whatever it says). Each inherits
   * what it leaves out from the primary: its `baseUrl` and `apiKeyEnv`.
   */
  fallbacks?: ModelFallback[];
}

export interface ModelFallback {
  baseUrl?: string;
  model: string;
  apiKeyEnv?: string;
}

/** Where one request of a step may go: the primary, or a fallback with what it inherits filled in. */
export interface ModelEndpoint {
  baseUrl: string;
  model: string;
  apiKeyEnv?: string;
}

/** The primary and its fallbacks, in the order they are tried. */
export function endpointsOf(spec: ModelSpec): ModelEndpoint[] {
  const primary: ModelEndpoint = { baseUrl: spec.baseUrl, model: spec.model, ...(spec.apiKeyEnv === undefined ? {} : { apiKeyEnv: spec.apiKeyEnv }) };
  const fallbacks = (spec.fallbacks ?? []).map((f): ModelEndpoint => {
    const apiKeyEnv = f.apiKeyEnv ?? spec.apiKeyEnv;
    return { baseUrl: f.baseUrl ?? spec.baseUrl, model: f.model, ...(apiKeyEnv === undefined ? {} : { apiKeyEnv }) };
  });
  return [primary, ...fallbacks];
}

/** The most fallbacks a model may have. */
export const MAX_FALLBACKS = 4;

export const DEFAULT_MAX_STEPS = 50;

/** Tokens one model request used, as the endpoint reported them. */
export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  /** What it cost in millionths of a US dollar: as a backend posted it, or priced by the service. */
  costMicroUsd?: number;
}
