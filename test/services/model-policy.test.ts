/**
 * The model policy (src/driver/model-policy.ts) on its own: base URLs are parsed
 * strictly and returned normalised, the operator's AGENTFOREST_MODEL_BASE_URLS list matches
 * by origin and whole path segments, and loadConfig refuses a bad list entry at start-up.
 */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { configErrorOf } from '../fixtures/config-error.js';
import { ServiceError } from '../../src/domain/errors.js';
import type { ModelSpec } from '../../src/domain/model.js';
import { checkModel, parseBaseUrl, type ModelPolicy } from '../../src/driver/model-policy.js';

const model = (baseUrl: string, extra: Partial<ModelSpec> = {}): ModelSpec => ({ provider: 'openai-compatible', baseUrl, model: 'm', ...extra });

/** The VALIDATION message checkModel throws, or a test failure if it accepts. */
function refusal(spec: ModelSpec, policy: ModelPolicy): string {
  try {
    checkModel(spec, policy);
  } catch (error) {
    if (error instanceof ServiceError && error.code === 'VALIDATION') return error.message;
    throw error;
  }
  throw new Error(`expected ${spec.baseUrl} to be refused`);
}


describe('checkModel', () => {
  const open: ModelPolicy = { env: {} };

  it.each([
    ['http://127.0.0.1:9/v1', 'http://127.0.0.1:9/v1'],
    ['http://127.0.0.1:9/v1/', 'http://127.0.0.1:9/v1'],
    ['http://127.0.0.1:9/v1///', 'http://127.0.0.1:9/v1'],
    ['https://api.example.com', 'https://api.example.com'],
    ['https://api.example.com/', 'https://api.example.com'],
    ['HTTPS://API.Example.COM:443/v1', 'https://api.example.com/v1'],
    ['http://api.example.com:80/v1', 'http://api.example.com/v1'],
    ['https://api.example.com/a/./b/../v1/.', 'https://api.example.com/a/v1'],
    ['https://api.example.com/a/%2e%2e/v1', 'https://api.example.com/v1'],
    ['https://api.example.com/openai/v1/chat/..', 'https://api.example.com/openai/v1'],
  ])('normalises %s to %s', (given, stored) => {
    const spec = model(given, { apiKeyEnv: 'DEMO_API_KEY', temperature: 0.5, maxSteps: 3 });
    const before = structuredClone(spec);
    expect(checkModel(spec, { env: { DEMO_API_KEY: 'sk' } })).toEqual({ ...before, baseUrl: stored });
    // The caller's object is left as it was.
    expect(spec).toEqual(before);
  });

  it.each([
    ['a query', 'https://api.example.com/v1?key=1'],
    ['an empty query', 'https://api.example.com/v1?'],
    ['an empty fragment', 'https://api.example.com/v1#'],
    ['a fragment', 'https://api.example.com/v1#part'],
    ['a user and password', 'https://u:p@api.example.com/v1'],
    ['a user name', 'https://u@api.example.com/v1'],
    ['a password only', 'https://:p@api.example.com/v1'],
  ])('refuses a base URL with %s', (_what, baseUrl) => {
    expect(refusal(model(baseUrl), open)).toBe('model.baseUrl must not carry credentials, a query or a fragment; name the key with model.apiKeyEnv');
  });

  it('refuses what is not an http(s) URL', () => {
    expect(refusal(model('ftp://api.example.com/v1'), open)).toBe('model.baseUrl "ftp://api.example.com/v1" must be an http or https URL');
    expect(refusal(model('file:///etc/passwd'), open)).toBe('model.baseUrl "file:///etc/passwd" must be an http or https URL');
    expect(refusal(model('https://gw.internal/openai/x%2F..%2F..%2Fadmin'), open)).toBe(
      'model.baseUrl "https://gw.internal/openai/x%2F..%2F..%2Fadmin" must not contain an encoded slash or backslash',
    );
    expect(refusal(model('https://gw.internal/openai/x%5c..'), open)).toMatch(/encoded slash or backslash$/);
    expect(refusal(model('/v1'), open)).toBe('model.baseUrl "/v1" is not a URL');
  });

  describe('with AGENTFOREST_MODEL_BASE_URLS', () => {
    const policy: ModelPolicy = { env: {}, baseUrls: ['https://api.openai.com', 'https://gw.internal/openai/', 'http://127.0.0.1:8080/v1'] };

    it.each([
      'https://api.openai.com.evil.example/v1',
      'https://api.openai.com.evil.example',
      'https://evil.example/api.openai.com/v1',
      'http://api.openai.com/v1',
      'https://api.openai.com:8443/v1',
      'https://gw.internal/openai/../admin',
      'https://gw.internal/openai/%2e%2e/admin',
      'https://gw.internal/openai/%2E%2E/admin',
      'https://gw.internal/openai/.%2e/admin',
      'https://gw.internal/openai/v1/../../admin',
      'https://gw.internal/openaix',
      'https://gw.internal/openai-v2/v1',
      'https://gw.internal/',
      'https://gw.internal',
      'http://127.0.0.1:8080/v10',
      'http://127.0.0.1:8080/',
      'http://localhost:8080/v1',
    ])('refuses %s', (baseUrl) => {
      expect(refusal(model(baseUrl), policy)).toBe(`model.baseUrl "${baseUrl}" is not one of the endpoints this service may call (AGENTFOREST_MODEL_BASE_URLS)`);
    });

    it.each([
      ['https://api.openai.com', 'https://api.openai.com'],
      ['https://api.openai.com/v1', 'https://api.openai.com/v1'],
      ['https://API.OPENAI.COM:443/v1/', 'https://api.openai.com/v1'],
      ['https://gw.internal/openai', 'https://gw.internal/openai'],
      ['https://gw.internal/openai/', 'https://gw.internal/openai'],
      ['https://gw.internal/openai/v1', 'https://gw.internal/openai/v1'],
      ['https://gw.internal/openai/x/../v1', 'https://gw.internal/openai/v1'],
      ['https://gw.internal/other/../openai/v1', 'https://gw.internal/openai/v1'],
      ['http://127.0.0.1:8080/v1/', 'http://127.0.0.1:8080/v1'],
      ['http://127.0.0.1:8080/v1/deployments/m', 'http://127.0.0.1:8080/v1/deployments/m'],
    ])('accepts %s, stored as %s', (given, stored) => {
      expect(checkModel(model(given), policy).baseUrl).toBe(stored);
    });

    it('matches a prefix given with or without its trailing slash alike', () => {
      for (const prefix of ['https://gw.internal/openai', 'https://gw.internal/openai/', 'https://gw.internal/openai//']) {
        const p: ModelPolicy = { env: {}, baseUrls: [prefix] };
        expect(checkModel(model('https://gw.internal/openai/v1'), p).baseUrl, prefix).toBe('https://gw.internal/openai/v1');
        expect(() => checkModel(model('https://gw.internal/openaiv1'), p), prefix).toThrow(/is not one of the endpoints/);
      }
    });

    it('checks the key variable as well as the endpoint', () => {
      const p: ModelPolicy = { env: { DEMO_API_KEY: 'sk' }, baseUrls: ['https://api.openai.com'] };
      expect(checkModel(model('https://api.openai.com/v1', { apiKeyEnv: 'DEMO_API_KEY' }), p).apiKeyEnv).toBe('DEMO_API_KEY');
      expect(refusal(model('https://api.openai.com/v1', { apiKeyEnv: 'OTHER_API_KEY' }), p)).toBe('model.apiKeyEnv "OTHER_API_KEY" is not set in the service\'s environment');
    });
  });
});

describe('parseBaseUrl', () => {
  it('names the field it checks', () => {
    expect(parseBaseUrl('https://gw.internal/openai/', 'AGENTFOREST_MODEL_BASE_URLS').pathname).toBe('/openai/');
    expect(() => parseBaseUrl('gw.internal/openai', 'AGENTFOREST_MODEL_BASE_URLS')).toThrow('AGENTFOREST_MODEL_BASE_URLS "gw.internal/openai" is not a URL');
    expect(() => parseBaseUrl('https://gw.internal/openai?', 'AGENTFOREST_MODEL_BASE_URLS')).toThrow(/^AGENTFOREST_MODEL_BASE_URLS must not carry credentials, a query or a fragment/);
  });
});

describe('loadConfig and AGENTFOREST_MODEL_BASE_URLS', () => {
  it('keeps a list of valid prefixes', () => {
    const config = loadConfig({ AGENTFOREST_MODEL_BASE_URLS: ' https://api.openai.com , https://gw.internal/openai/ ,' });
    expect(config.modelPolicy.baseUrls).toEqual(['https://api.openai.com', 'https://gw.internal/openai/']);
  });

  it.each([
    ['not a URL', 'gw.internal/openai', 'AGENTFOREST_MODEL_BASE_URLS "gw.internal/openai" is not a URL'],
    ['an empty query', 'https://gw.internal/openai?', 'AGENTFOREST_MODEL_BASE_URLS must not carry credentials, a query or a fragment'],
    ['an empty fragment', 'https://gw.internal/openai#', 'AGENTFOREST_MODEL_BASE_URLS must not carry credentials, a query or a fragment'],
    ['credentials', 'https://u:secret-pw@gw.internal/openai', 'AGENTFOREST_MODEL_BASE_URLS must not carry credentials, a query or a fragment'],
  ])('refuses an entry that is %s, next to a valid one', (_what, entry, problem) => {
    const error = configErrorOf({ AGENTFOREST_MODEL_BASE_URLS: `https://api.openai.com,${entry}` });
    expect(error.message).toContain(problem);
    // One problem: the valid entry is not among them.
    expect(error.message.split('\n  - ')).toHaveLength(2);
    expect(error.message).not.toContain('secret-pw');
  });

  it('names each entry that is not an http(s) URL', () => {
    const error = configErrorOf({ AGENTFOREST_MODEL_BASE_URLS: 'ftp://models.internal/v1,ws://gw.internal/openai' });
    expect(error.message).toContain('ftp://models.internal/v1');
    expect(error.message).toContain('ws://gw.internal/openai');
  });
});
