/**
 * The endpoints' keys taken out of a streamed answer's pieces (src/driver/key-redaction.ts):
 * wherever a key is cut, no published piece holds it or the rest of it, and the pieces add up
 * to the whole answer redacted at once, as it is recorded.
 */
import { describe, expect, it } from 'vitest';
import type { AnswerPiece } from '../../../src/driver/chat-answer.js';
import { KeyRedaction } from '../../../src/driver/key-redaction.js';

const KEY = 'sk-live-SECRET0123456789';
const OTHER = 'sk-other-987';

/** The pieces `texts` becomes, text first and then one call's arguments, each channel cut as given. */
function run(redaction: KeyRedaction, texts: readonly string[], args: readonly string[] = []): AnswerPiece[] {
  const out: AnswerPiece[] = [];
  const sink = redaction.pieces((piece) => out.push(piece));
  for (const text of texts) sink.piece({ text });
  args.forEach((argumentsDelta, i) => sink.piece({ toolCall: { index: 0, ...(i === 0 ? { id: 'c1', name: 'lookup' } : {}), argumentsDelta } }));
  sink.flush();
  return out;
}

const joined = (pieces: readonly AnswerPiece[]): string => pieces.map((p) => p.text ?? '').join('');
const joinedArgs = (pieces: readonly AnswerPiece[]): string => pieces.map((p) => p.toolCall?.argumentsDelta ?? '').join('');

/** `text` cut into pieces at every position in `cuts`. */
function cut(text: string, cuts: readonly number[]): string[] {
  const points = [0, ...cuts, text.length];
  return points.slice(1).map((end, i) => text.slice(points[i], end));
}

describe('key redaction of streamed pieces', () => {
  const redaction = new KeyRedaction([KEY, undefined, OTHER, '']);
  const answer = `my key is ${KEY}, and ${OTHER} is the other; ${KEY}`;
  const whole = redaction.text(answer);

  it('redacts a whole answer, every key and every occurrence', () => {
    expect(whole).toBe('my key is [redacted], and [redacted] is the other; [redacted]');
  });

  it('publishes no part of a key, and the same text as the whole redacted, wherever the pieces are cut', () => {
    for (let at = 1; at < answer.length; at++) {
      for (const pieces of [cut(answer, [at]), cut(answer, [at, Math.min(answer.length - 1, at + 3)]), [...answer]]) {
        const out = run(redaction, pieces);
        expect(joined(out), `cut at ${at}`).toBe(whole);
        for (const piece of out) expect(piece.text, `cut at ${at}`).not.toMatch(/SECRET|sk-live-S|987/);
      }
    }
  });

  it("redacts a call's arguments in pieces, its id and name whole, and holds nothing back of text that cannot start a key", () => {
    const args = `{"k":"${KEY}"}`;
    const out = run(redaction, ['plain ', 'text'], cut(args, [9, 14]));
    expect(out[0]).toEqual({ text: 'plain ' });
    expect(out[1]).toEqual({ text: 'text' });
    expect(out[2]).toEqual({ toolCall: { index: 0, id: 'c1', name: 'lookup', argumentsDelta: '{"k":"' } });
    expect(joinedArgs(out)).toBe('{"k":"[redacted]"}');
    expect(out.every((p) => !JSON.stringify(p).includes('SECRET'))).toBe(true);
  });

  it('gives back at the end what it held that turned out not to be a key', () => {
    expect(run(redaction, ['ends with sk-li'])).toEqual([{ text: 'ends with ' }, { text: 'sk-li' }]);
    expect(run(redaction, ['sk-', 'lively'])).toEqual([{ text: 'sk-lively' }]);
  });

  it('passes pieces through untouched without keys', () => {
    const none = new KeyRedaction([undefined]);
    expect(run(none, ['sk-', 'live'])).toEqual([{ text: 'sk-' }, { text: 'live' }]);
  });
});
