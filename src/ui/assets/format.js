/** Short human forms of the numbers and times the API returns. */

const COMPACT = new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: 1 });

/** 1234 -> "1.2K". */
export function compact(n) {
  return COMPACT.format(n);
}

/** Millionths of a US dollar -> "$0.0123". */
export function dollars(microUsd) {
  const usd = microUsd / 1_000_000;
  return usd === 0 ? '$0' : usd < 0.01 ? `$${usd.toPrecision(2)}` : `$${usd.toFixed(2)}`;
}

/** What an agent (or its subtree) spent: "3 steps · 1.2K tokens · $0.01"; empty when nothing. */
export function usageText(usage) {
  if (usage === undefined || usage === null) return '';
  const parts = [];
  if (usage.steps > 0) parts.push(`${compact(usage.steps)} step${usage.steps === 1 ? '' : 's'}`);
  if (usage.totalTokens > 0) parts.push(`${compact(usage.totalTokens)} tokens`);
  if (usage.costMicroUsd > 0) parts.push(dollars(usage.costMicroUsd));
  return parts.join(' · ');
}

/** An ISO time -> "14:03:07" (today) or "2026-12-01 14:03". */
export function clock(iso) {
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return '';
  const sameDay = at.toDateString() === new Date().toDateString();
  return sameDay
    ? at.toLocaleTimeString('en-GB', { hour12: false })
    : `${at.toISOString().slice(0, 10)} ${at.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit', hour12: false })}`;
}

/** How long something has waited: "12 s", "4 min", "2 h 5 min", "3 d 4 h". */
export function waitedText(ms) {
  const seconds = Math.max(0, Math.floor(ms / 1000));
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  if (hours < 24) return `${hours} h${minutes % 60 === 0 ? '' : ` ${minutes % 60} min`}`;
  const days = Math.floor(hours / 24);
  return `${days} d${hours % 24 === 0 ? '' : ` ${hours % 24} h`}`;
}

/** The text of message content: a string, or text blocks joined with a newline. */
export function contentText(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((block) => (typeof block?.text === 'string' ? block.text : '')).join('\n');
}
