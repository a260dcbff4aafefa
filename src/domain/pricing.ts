/**
 * Model prices, for the `costMicroUsd` of a model request's usage. A price is in millionths
 * of a US dollar per token — the same number as US dollars per million tokens, the way model
 * vendors quote it. The key `*` prices any model not listed (and a backend's output that names
 * no model). A request is charged its prompt and completion tokens at those prices, rounded up
 * to a whole micro-dollar; usage that already carries a cost keeps it.
 */
import type { TokenUsage } from './model.js';

export interface ModelPrice {
  /** Micro-dollars per prompt token (= dollars per million prompt tokens). */
  prompt: number;
  /** Micro-dollars per completion token. */
  completion: number;
}

export type ModelPrices = ReadonlyMap<string, ModelPrice>;

export const NO_PRICES: ModelPrices = new Map();

/** The prices of AGENTFOREST_MODEL_PRICES: `{"<model>": {"prompt": n, "completion": n}, ...}`. Throws a readable Error. */
export function parseModelPrices(text: string): ModelPrices {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new Error(`is not JSON (${error instanceof Error ? error.message : String(error)})`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('must be a JSON object of model names to prices');
  const prices = new Map<string, ModelPrice>();
  for (const [model, value] of Object.entries(parsed)) {
    const price = value as Partial<Record<string, unknown>> | null;
    const ok =
      typeof price === 'object' && price !== null && Object.keys(price).every((k) => k === 'prompt' || k === 'completion') && isPrice(price.prompt) && isPrice(price.completion);
    if (!ok) throw new Error(`"${model}": a price is {"prompt": <micro-USD per token>, "completion": <micro-USD per token>}, both numbers of at least 0`);
    prices.set(model, { prompt: price.prompt as number, completion: price.completion as number });
  }
  return prices;
}

function isPrice(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

/** `usage` with its cost, when it has none and `model` (or `*`) has a price. */
export function priceUsage(usage: TokenUsage, model: string | undefined, prices: ModelPrices): TokenUsage {
  if (usage.costMicroUsd !== undefined || prices.size === 0) return usage;
  const price = (model === undefined ? undefined : prices.get(model)) ?? prices.get('*');
  if (price === undefined) return usage;
  const exact = usage.promptTokens * price.prompt + usage.completionTokens * price.completion;
  // Rounded up, but not for the last bits of floating-point error (0.15 * 100 is not 15).
  return { ...usage, costMicroUsd: Math.max(0, Math.ceil(exact - 1e-9)) };
}
