/**
 * loadConfig(env): defaults, parsing, and refusals an operator can act on (the variable and
 * its allowed values named in the message). isLoopback decides whether keys are required.
 */
import { describe, expect, it } from 'vitest';
import { isLoopback, loadConfig } from '../../src/config.js';
import { configErrorOf } from '../fixtures/config-error.js';


describe('loadConfig', () => {
  it('fills in the defaults for an empty environment', () => {
    const config = loadConfig({});

    expect(config.host).toBe('127.0.0.1');
    expect(config.port).toBe(3000);
    expect(config.dataPath).toBe('./data/agentforest.db');
    expect(config.reportDelivery).toBe('quiet');
    expect(config.sqliteSynchronous).toBe('full');
    expect(config.apiKeys).toEqual([]);
    expect(config.packages).toBeUndefined();
  });

  it('treats empty variables as unset', () => {
    const config = loadConfig({ HOST: '', PORT: '', AGENTFOREST_REPORT_DELIVERY: '' });

    expect(config.host).toBe('127.0.0.1');
    expect(config.port).toBe(3000);
    expect(config.reportDelivery).toBe('quiet');
  });

  it('reads the values it is given', () => {
    const config = loadConfig({
      PORT: '8080',
      AGENTFOREST_DATA: ':memory:',
      AGENTFOREST_REPORT_DELIVERY: 'wakeup',
      AGENTFOREST_SQLITE_SYNCHRONOUS: 'normal',
      AGENTFOREST_PACKAGES: 'subagent, subagent-report',
    });

    expect(config.port).toBe(8080);
    expect(config.dataPath).toBe(':memory:');
    expect(config.reportDelivery).toBe('wakeup');
    expect(config.sqliteSynchronous).toBe('normal');
    expect(config.packages).toEqual(['subagent', 'subagent-report']);
  });

  it('splits API keys on commas, trims them and drops empty ones', () => {
    const config = loadConfig({ AGENTFOREST_API_KEYS: ' key-one , key-two,,key-three ,' });

    expect(config.apiKeys).toEqual(['key-one', 'key-two', 'key-three']);
  });

  it('refuses an unknown report delivery, naming the variable and the allowed values', () => {
    const error = configErrorOf({ AGENTFOREST_REPORT_DELIVERY: 'shout' });

    expect(error.name).toBe('ConfigError');
    expect(error.message).toContain('AGENTFOREST_REPORT_DELIVERY');
    expect(error.message).toContain('"shout"');
    expect(error.message).toContain('quiet');
    expect(error.message).toContain('wakeup');
  });

  it('refuses an unknown sqlite synchronous mode, naming the allowed values', () => {
    const error = configErrorOf({ AGENTFOREST_SQLITE_SYNCHRONOUS: 'off' });

    expect(error.message).toContain('AGENTFOREST_SQLITE_SYNCHRONOUS');
    expect(error.message).toContain('full, normal');
  });

  it.each(['abc', '70000', '-1', '80.5', '1e3'])('refuses PORT=%s', (port) => {
    const error = configErrorOf({ PORT: port });

    expect(error.message).toContain('PORT');
  });

  it('reads model prices and the spawn budget option', () => {
    const config = loadConfig({ AGENTFOREST_MODEL_PRICES: '{"m": {"prompt": 0.15, "completion": 0.6}, "*": {"prompt": 3, "completion": 15}}', AGENTFOREST_SPAWN_BUDGETS: 'on' });

    expect([...config.modelPrices]).toEqual([
      ['m', { prompt: 0.15, completion: 0.6 }],
      ['*', { prompt: 3, completion: 15 }],
    ]);
    expect(config.spawnBudgets).toBe(true);
    expect(loadConfig({}).modelPrices.size).toBe(0);
    expect(loadConfig({}).spawnBudgets).toBe(false);
  });

  it('refuses model prices that are not JSON or not prices, saying what a price is', () => {
    expect(configErrorOf({ AGENTFOREST_MODEL_PRICES: '{m: 1}' }).message).toContain('AGENTFOREST_MODEL_PRICES is not JSON');
    expect(configErrorOf({ AGENTFOREST_MODEL_PRICES: '{"m": {"prompt": -1, "completion": 1}}' }).message).toContain('"m": a price is {"prompt": <micro-USD per token>, "completion": <micro-USD per token>}');
    expect(configErrorOf({ AGENTFOREST_MODEL_PRICES: '{"m": {"prompt": 1}}' }).message).toContain('"m": a price is');
    expect(configErrorOf({ AGENTFOREST_MODEL_PRICES: '[1]' }).message).toContain('must be a JSON object of model names to prices');
  });

  it('reads the client deadlines, and refuses a headers timeout longer than the request timeout', () => {
    expect(loadConfig({}).timeouts).toEqual({ requestMs: 30_000, headersMs: 10_000, keepAliveMs: 72_000 });
    expect(loadConfig({ AGENTFOREST_REQUEST_TIMEOUT_MS: '5000', AGENTFOREST_HEADERS_TIMEOUT_MS: '5000', AGENTFOREST_KEEP_ALIVE_TIMEOUT_MS: '2000' }).timeouts).toEqual({
      requestMs: 5_000,
      headersMs: 5_000,
      keepAliveMs: 2_000,
    });
    const error = configErrorOf({ AGENTFOREST_REQUEST_TIMEOUT_MS: '5000', AGENTFOREST_HEADERS_TIMEOUT_MS: '6000' });
    expect(error.message).toContain('AGENTFOREST_HEADERS_TIMEOUT_MS=6000 is longer than AGENTFOREST_REQUEST_TIMEOUT_MS=5000');
  });

  it('reports every problem in one message: a number that is not one does not hide a bad mode', () => {
    const error = configErrorOf({ PORT: 'abc', AGENTFOREST_REPORT_DELIVERY: 'shout', AGENTFOREST_RATE_LIMIT: '-1' });

    expect(error.message).toContain('PORT="abc": must be a whole number written in digits');
    expect(error.message).toContain('AGENTFOREST_REPORT_DELIVERY="shout"');
    expect(error.message).toContain('AGENTFOREST_RATE_LIMIT="-1"');
    expect(error.message.match(/PORT=/g)).toHaveLength(1);
  });

  it('warns about AGENTFOREST_ variables that are no setting, with the closest known name, and leaves the tooling variables alone', () => {
    const config = loadConfig({
      AGENTFOREST_DRAIN_TIMEOUT: '5000',
      AGENTFOREST_BODYLIMIT: '2048',
      AGENTFOREST_WHATEVER_THIS_IS_MEANT_TO_BE: 'x',
      AGENTFOREST_TEST_DATABASE_URL: 'postgres://x',
      AGENTFOREST_CHAOS: 'long',
      OTHER_VARIABLE: 'x',
    });

    expect(config.warnings).toEqual([
      'AGENTFOREST_BODYLIMIT is not a setting of agentforest and is ignored; did you mean AGENTFOREST_BODY_LIMIT?',
      'AGENTFOREST_DRAIN_TIMEOUT is not a setting of agentforest and is ignored; did you mean AGENTFOREST_DRAIN_TIMEOUT_MS?',
      'AGENTFOREST_WHATEVER_THIS_IS_MEANT_TO_BE is not a setting of agentforest and is ignored',
    ]);
    expect(config.drainTimeoutMs).toBe(10_000);
    expect(loadConfig({}).warnings).toEqual([]);
  });

  it('refuses unknown package names and names them', () => {
    const error = configErrorOf({ AGENTFOREST_PACKAGES: 'subagent,bogus' });

    expect(error.message).toContain('AGENTFOREST_PACKAGES');
    expect(error.message).toContain('bogus');
    expect(error.message).toContain('subagent-report');
  });

  it('refuses a non-loopback HOST without API keys and says to set AGENTFOREST_API_KEYS', () => {
    const error = configErrorOf({ HOST: '0.0.0.0' });

    expect(error.message).toContain('0.0.0.0');
    expect(error.message).toContain('AGENTFOREST_API_KEYS');
  });

  it('refuses a non-loopback HOST whose API keys are only commas', () => {
    expect(configErrorOf({ HOST: '0.0.0.0', AGENTFOREST_API_KEYS: ' , ,' }).message).toContain('AGENTFOREST_API_KEYS');
  });

  it('accepts a non-loopback HOST with an API key', () => {
    const config = loadConfig({ HOST: '0.0.0.0', AGENTFOREST_API_KEYS: 'secret' });

    expect(config.host).toBe('0.0.0.0');
    expect(config.apiKeys).toEqual(['secret']);
  });
});

describe('isLoopback', () => {
  it.each(['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', 'LOCALHOST'])('%s is loopback', (host) => {
    expect(isLoopback(host)).toBe(true);
  });

  it.each(['0.0.0.0', '10.0.0.1', '::', '192.168.1.10', 'example.com', '128.0.0.1'])('%s is not loopback', (host) => {
    expect(isLoopback(host)).toBe(false);
  });
});
