/**
 * AGENTFOREST_MODEL_LIMITS: read as JSON limits per base URL (normalised as model.baseUrl is)
 * and model, an entry without a model holding for every model at its base URL; anything else
 * fails the start with a message naming the variable and what is wrong.
 */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { configErrorOf } from '../fixtures/config-error.js';

describe('AGENTFOREST_MODEL_LIMITS', () => {
  it('reads limits per base URL and model; an entry without a model holds for every other model at its base URL', () => {
    const { modelLimits } = loadConfig({
      AGENTFOREST_MODEL_LIMITS: JSON.stringify([
        { baseUrl: 'https://api.example.com/v1/', model: 'gpt-4o', requestsPerMinute: 60, tokensPerMinute: 90_000 },
        { baseUrl: 'https://api.example.com/v1', requestsPerMinute: 500 },
      ]),
    });
    expect(modelLimits.any).toBe(true);
    expect(modelLimits.of('https://api.example.com/v1 gpt-4o')).toEqual({ requestsPerMinute: 60, tokensPerMinute: 90_000 });
    expect(modelLimits.of('https://api.example.com/v1 gpt-4o-mini')).toEqual({ requestsPerMinute: 500 });
    expect(modelLimits.of('https://elsewhere.example/v1 gpt-4o')).toBeUndefined();
    expect(loadConfig({}).modelLimits.any).toBe(false);
  });

  for (const [what, value, message] of [
    ['not JSON', '[{baseUrl: 1}]', 'AGENTFOREST_MODEL_LIMITS is not JSON'],
    ['not an array', '{"baseUrl": "https://api.example.com/v1", "requestsPerMinute": 1}', 'AGENTFOREST_MODEL_LIMITS must be a JSON array of limits'],
    ['an entry that is no object', '[1]', 'AGENTFOREST_MODEL_LIMITS [0] must be an object'],
    ['an unknown field', '[{"baseUrl": "https://api.example.com/v1", "rpm": 1}]', 'AGENTFOREST_MODEL_LIMITS [0] has unknown field(s) rpm'],
    ['no base URL', '[{"model": "m", "requestsPerMinute": 1}]', 'AGENTFOREST_MODEL_LIMITS [0].baseUrl must be a URL'],
    ['a base URL that is no http(s) URL', '[{"baseUrl": "ftp://api.example.com", "requestsPerMinute": 1}]', 'AGENTFOREST_MODEL_LIMITS [0].baseUrl "ftp://api.example.com" must be an http or https URL'],
    ['an empty model', '[{"baseUrl": "https://api.example.com/v1", "model": "", "requestsPerMinute": 1}]', 'AGENTFOREST_MODEL_LIMITS [0].model must be a model name'],
    ['a limit that is no whole number', '[{"baseUrl": "https://api.example.com/v1", "tokensPerMinute": 1.5}]', 'AGENTFOREST_MODEL_LIMITS [0].tokensPerMinute must be a whole number of at least 1'],
    ['a limit of zero', '[{"baseUrl": "https://api.example.com/v1", "requestsPerMinute": 0}]', 'AGENTFOREST_MODEL_LIMITS [0].requestsPerMinute must be a whole number of at least 1'],
    ['no limit', '[{"baseUrl": "https://api.example.com/v1", "model": "m"}]', 'AGENTFOREST_MODEL_LIMITS [0] sets neither requestsPerMinute nor tokensPerMinute'],
    [
      'the same provider twice (spelled two ways)',
      '[{"baseUrl": "https://api.example.com/v1", "model": "m", "requestsPerMinute": 1}, {"baseUrl": "https://api.example.com/v1/", "model": "m", "requestsPerMinute": 2}]',
      'AGENTFOREST_MODEL_LIMITS [1] repeats the limit of https://api.example.com/v1 m',
    ],
  ] as const) {
    it(`refuses ${what}, naming the variable`, () => {
      expect(configErrorOf({ AGENTFOREST_MODEL_LIMITS: value }).message).toContain(message);
    });
  }

  it('is reported with the other problems of the environment', () => {
    const message = configErrorOf({ AGENTFOREST_MODEL_LIMITS: '[1]', AGENTFOREST_MODEL_RETRIES: 'many' }).message;
    expect(message).toContain('AGENTFOREST_MODEL_LIMITS [0] must be an object');
    expect(message).toContain('AGENTFOREST_MODEL_RETRIES');
  });
});
