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
}

export const DEFAULT_MAX_STEPS = 50;

/** Tokens one model request used, as the endpoint reported them. */
export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  /** What it cost in millionths of a US dollar: as a backend posted it, or priced by the service. */
  costMicroUsd?: number;
}
