import { describe, expect, it } from 'vitest';
import { DEFAULT_BACKOFF, parseRetryAfter, retryDelayMs } from '../../../src/observation/webhooks/backoff.js';

const always = (value: number) => (): number => value;

describe('retryDelayMs', () => {
  it('doubles from the base delay, the jitter taking off up to half', () => {
    const options = { baseMs: 1000, maxMs: 60_000 };
    expect([1, 2, 3, 4].map((n) => retryDelayMs(n, options, always(0)))).toEqual([500, 1000, 2000, 4000]);
    expect([1, 2, 3, 4].map((n) => retryDelayMs(n, options, always(0.5)))).toEqual([750, 1500, 3000, 6000]);
    expect([1, 2, 3, 4].map((n) => retryDelayMs(n, options, always(0.999_999)))).toEqual([1000, 2000, 4000, 8000]);
  });

  it('stops doubling at the ceiling, however many the failures', () => {
    const options = { baseMs: 1000, maxMs: 10_000 };
    expect(retryDelayMs(5, options, always(0.5))).toBe(7500);
    expect(retryDelayMs(40, options, always(0))).toBe(5000);
    expect(retryDelayMs(5000, options, always(0.999_999))).toBe(10_000);
  });

  it('rounds to whole milliseconds', () => {
    expect(retryDelayMs(1, { baseMs: 3, maxMs: 100 }, always(0))).toBe(2);
    expect(retryDelayMs(1, { baseMs: 1000, maxMs: 10_000 }, always(1 / 3))).toBe(667);
  });

  it('defaults to one second doubling up to an hour, within the jitter bounds', () => {
    expect(DEFAULT_BACKOFF).toEqual({ baseMs: 1000, maxMs: 3_600_000 });
    for (let failures = 1; failures <= 30; failures++) {
      const cap = Math.min(3_600_000, 1000 * 2 ** (failures - 1));
      const delay = retryDelayMs(failures, DEFAULT_BACKOFF);
      expect(delay).toBeGreaterThanOrEqual(cap / 2);
      expect(delay).toBeLessThanOrEqual(cap);
      expect(Number.isInteger(delay)).toBe(true);
    }
  });

  it('refuses a count of failures below one or not whole', () => {
    expect(() => retryDelayMs(0, DEFAULT_BACKOFF)).toThrow(RangeError);
    expect(() => retryDelayMs(1.5, DEFAULT_BACKOFF)).toThrow(RangeError);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.UTC(2026, 0, 15, 12, 0, 0);

  it('reads delta-seconds as milliseconds from now', () => {
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter('120', now)).toBe(120_000);
    expect(parseRetryAfter(' 5 ', now)).toBe(5000);
  });

  it('reads an IMF-fixdate as the time until it', () => {
    expect(parseRetryAfter('Thu, 15 Jan 2026 12:01:30 GMT', now)).toBe(90_000);
    expect(parseRetryAfter('Fri, 16 Jan 2026 12:00:00 GMT', now)).toBe(86_400_000);
  });

  it('reads the obsolete RFC 850 and asctime dates', () => {
    expect(parseRetryAfter('Thursday, 15-Jan-26 12:00:10 GMT', now)).toBe(10_000);
    expect(parseRetryAfter('Thu Jan 15 12:00:20 2026', now)).toBe(20_000);
    expect(parseRetryAfter('Sun Feb  1 12:00:00 2026', now)).toBe(17 * 86_400_000);
  });

  it('waits nothing for a date already past', () => {
    expect(parseRetryAfter('Wed, 14 Jan 2026 12:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('Sunday, 06-Nov-94 08:49:37 GMT', now)).toBe(0);
  });

  it.each([
    undefined,
    '',
    '-5',
    '1.5',
    '1e3',
    'soon',
    '2026-01-15T12:01:00Z',
    'Thu, 15 Jan 2026 12:01:30 UTC',
    'Thu, 15 Jan 2026 12:01:30',
    'Thu, 31 Feb 2026 12:00:00 GMT',
    'Thu, 15 Foo 2026 12:00:00 GMT',
    'Thu, 15 Jan 2026 25:00:00 GMT',
    '15 Jan 2026 12:01:30 GMT',
  ])('is undefined for %j', (value) => {
    expect(parseRetryAfter(value, now)).toBeUndefined();
  });
});
