/**
 * When a failed webhook is tried again: exponential backoff with equal jitter (the delay
 * doubles with each failure up to a ceiling, and a random half of it is shaved off so that
 * endpoints failing together are not retried together), unless the receiver said when with
 * `Retry-After`.
 *
 * `Retry-After` is either whole seconds or an HTTP-date (RFC 9110 §5.6.7: the IMF-fixdate,
 * and the obsolete RFC 850 and asctime forms a recipient must still accept), always in GMT.
 */

/** The first retry delay and the ceiling the doubling stops at, in milliseconds. */
export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
}

/** One second doubling up to one hour. */
export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 1000, maxMs: 3_600_000 };

/**
 * The delay before the next try after `failures` (≥ 1) consecutive failures: a whole number of
 * milliseconds in [cap/2, cap], cap being `baseMs * 2^(failures-1)` held to `maxMs`.
 */
export function retryDelayMs(failures: number, options: BackoffOptions, random: () => number = Math.random): number {
  if (!Number.isInteger(failures) || failures < 1) throw new RangeError('a retry follows at least one failure');
  const cap = Math.min(options.maxMs, options.baseMs * 2 ** (failures - 1));
  return Math.round(cap / 2 + (random() * cap) / 2);
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const DAY = '(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)';
const LONG_DAY = '(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)';
const MONTH = `(${MONTHS.join('|')})`;
const TIME = '(\\d{2}):(\\d{2}):(\\d{2})';
const IMF_FIXDATE = new RegExp(`^${DAY}, (\\d{2}) ${MONTH} (\\d{4}) ${TIME} GMT$`);
const RFC_850 = new RegExp(`^${LONG_DAY}, (\\d{2})-${MONTH}-(\\d{2}) ${TIME} GMT$`);
const ASCTIME = new RegExp(`^${DAY} ${MONTH} ([ \\d]\\d) ${TIME} (\\d{4})$`);
const DELTA_SECONDS = /^\d+$/;

/**
 * The milliseconds from `nowMs` a `Retry-After` value asks to wait (0 for a date already
 * past), or undefined when the value is absent or neither delta-seconds nor an HTTP-date.
 */
export function parseRetryAfter(value: string | undefined, nowMs: number): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (DELTA_SECONDS.test(text)) {
    const ms = Number(text) * 1000;
    return Number.isFinite(ms) ? ms : undefined;
  }
  const at = parseHttpDate(text, nowMs);
  return at === undefined ? undefined : Math.max(0, at - nowMs);
}

/** The Unix milliseconds of an HTTP-date, or undefined if `text` is not one. */
function parseHttpDate(text: string, nowMs: number): number | undefined {
  let match = IMF_FIXDATE.exec(text);
  if (match) return utc(Number(match[3]), match[2], match[1], match.slice(4));
  match = RFC_850.exec(text);
  if (match) return utc(fullYear(Number(match[3]), nowMs), match[2], match[1], match.slice(4));
  match = ASCTIME.exec(text);
  if (match) return utc(Number(match[6]), match[1], match[2], match.slice(3, 6));
  return undefined;
}

/**
 * RFC 850's two-digit year: the year in this century, unless that is more than 50 years
 * ahead, which means the previous one.
 */
function fullYear(twoDigits: number, nowMs: number): number {
  const thisYear = new Date(nowMs).getUTCFullYear();
  const century = thisYear - (thisYear % 100);
  const year = century + twoDigits;
  return year > thisYear + 50 ? year - 100 : year;
}

function utc(year: number, month: string | undefined, day: string | undefined, time: (string | undefined)[]): number | undefined {
  const monthIndex = MONTHS.indexOf(month ?? '');
  const dayOfMonth = Number(day);
  const [hours, minutes, seconds] = time.map(Number);
  if (monthIndex === -1 || hours === undefined || minutes === undefined || seconds === undefined) return undefined;
  if (hours > 23 || minutes > 59 || seconds > 60) return undefined;
  const ms = Date.UTC(year, monthIndex, dayOfMonth, hours, minutes, Math.min(seconds, 59));
  // Date.UTC rolls 31 Feb over into March; a date that rolled over is not a date.
  if (new Date(ms).getUTCDate() !== dayOfMonth) return undefined;
  return ms;
}
