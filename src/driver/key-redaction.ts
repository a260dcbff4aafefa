/**
 * The model endpoints' keys taken out of everything an endpoint says before it is kept or
 * shown: its error text, its answer as recorded, and the pieces of a streamed answer as they
 * are published. An endpoint may quote the key it was sent, and a model may write one it met in
 * the conversation; each becomes `[redacted]`.
 *
 * A key may arrive split over pieces. For each channel of a stream (the answer's text, each
 * call's arguments), the end of what came so far that could begin a key is held back until the
 * next piece shows whether it does, or the answer is whole (`flush`). The pieces published then
 * add up to the recorded answer, redacted as a whole.
 */
import type { AnswerPiece } from './chat-answer.js';

export const REDACTED = '[redacted]';

export class KeyRedaction {
  private readonly keys: readonly string[];

  constructor(keys: readonly (string | undefined)[]) {
    // The longest first: a key that begins another is not replaced inside the longer one.
    this.keys = keys.filter((k): k is string => k !== undefined && k !== '').sort((a, b) => b.length - a.length);
  }

  /** `text` with every key in it replaced (bound: it may be handed on as a function). */
  readonly text = (text: string): string => this.keys.reduce((t, key) => (t.includes(key) ? t.split(key).join(REDACTED) : t), text);

  /** A sink for one attempt's pieces that hands `onPiece` each of them redacted; `flush` once the answer is whole. */
  pieces(onPiece: (piece: AnswerPiece) => void): { piece(piece: AnswerPiece): void; flush(): void } {
    if (this.keys.length === 0) return { piece: onPiece, flush: () => undefined };
    /** What each channel holds back: `text`, or a call's index. */
    const held = new Map<'text' | number, string>();
    const pass = (channel: 'text' | number, text: string): string => {
      const redacted = this.text((held.get(channel) ?? '') + text);
      const keep = this.keyStartAtEnd(redacted);
      held.set(channel, redacted.slice(redacted.length - keep));
      return redacted.slice(0, redacted.length - keep);
    };
    return {
      piece: (piece) => {
        if (piece.text !== undefined) {
          const text = pass('text', piece.text);
          if (text !== '') onPiece({ text });
          return;
        }
        const call = piece.toolCall!;
        const args = call.argumentsDelta === undefined ? '' : pass(call.index, call.argumentsDelta);
        const out: NonNullable<AnswerPiece['toolCall']> = { index: call.index };
        if (call.id !== undefined) out.id = this.text(call.id);
        if (call.name !== undefined) out.name = this.text(call.name);
        if (args !== '') out.argumentsDelta = args;
        if (out.id !== undefined || out.name !== undefined || args !== '') onPiece({ toolCall: out });
      },
      flush: () => {
        for (const [channel, text] of held) {
          if (text === '') continue;
          onPiece(channel === 'text' ? { text } : { toolCall: { index: channel, argumentsDelta: text } });
        }
        held.clear();
      },
    };
  }

  /** How many characters at the end of `text` could be the start of a key (a key's proper prefix). */
  private keyStartAtEnd(text: string): number {
    let longest = 0;
    for (const key of this.keys) {
      for (let length = Math.min(key.length - 1, text.length); length > longest; length--) {
        if (text.charCodeAt(text.length - length) === key.charCodeAt(0) && text.endsWith(key.slice(0, length))) {
          longest = length;
          break;
        }
      }
    }
    return longest;
  }
}
