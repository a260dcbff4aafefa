/**
 * The step-lease settings of loadConfig: AGENTFOREST_STEP_LEASE_MS (default 300000) and
 * AGENTFOREST_STEP_MAX_ATTEMPTS (default 3), read into `config.lease` as createSystem takes it,
 * and refused, with the variable named, outside their ranges or when not whole numbers.
 */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { DEFAULT_LEASE } from '../../src/steps/step-lease.js';
import { configErrorOf } from '../fixtures/config-error.js';

describe('step lease configuration', () => {
  it('defaults to a 5-minute lease and 3 attempts', () => {
    expect(loadConfig({}).lease).toEqual({ leaseMs: 300_000, maxAttempts: 3 });
    expect(DEFAULT_LEASE).toEqual({ leaseMs: 300_000, maxAttempts: 3 });
  });

  it('reads AGENTFOREST_STEP_LEASE_MS and AGENTFOREST_STEP_MAX_ATTEMPTS', () => {
    expect(loadConfig({ AGENTFOREST_STEP_LEASE_MS: '1500', AGENTFOREST_STEP_MAX_ATTEMPTS: '5' }).lease).toEqual({ leaseMs: 1_500, maxAttempts: 5 });
    expect(loadConfig({ AGENTFOREST_STEP_LEASE_MS: ' 100 ', AGENTFOREST_STEP_MAX_ATTEMPTS: '1' }).lease).toEqual({ leaseMs: 100, maxAttempts: 1 });
  });

  it('treats empty values as unset', () => {
    expect(loadConfig({ AGENTFOREST_STEP_LEASE_MS: '', AGENTFOREST_STEP_MAX_ATTEMPTS: ' ' }).lease).toEqual({ leaseMs: 300_000, maxAttempts: 3 });
  });

  it.each([
    ['AGENTFOREST_STEP_LEASE_MS', '99'],
    ['AGENTFOREST_STEP_LEASE_MS', '86400001'],
    ['AGENTFOREST_STEP_LEASE_MS', '2.5'],
    ['AGENTFOREST_STEP_LEASE_MS', '1e4'],
    ['AGENTFOREST_STEP_LEASE_MS', 'soon'],
    ['AGENTFOREST_STEP_MAX_ATTEMPTS', '0'],
    ['AGENTFOREST_STEP_MAX_ATTEMPTS', '101'],
    ['AGENTFOREST_STEP_MAX_ATTEMPTS', '-1'],
  ])('refuses %s=%s, naming the variable and the value', (name, value) => {
    expect(configErrorOf({ [name]: value }).message).toContain(`${name}=${JSON.stringify(value)}`);
  });
});
