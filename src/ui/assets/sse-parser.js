/**
 * An incremental Server-Sent Events parser (the WHATWG event-stream format): text goes in as
 * it arrives, in chunks cut anywhere; each complete event comes out once. Lines end with LF,
 * CRLF or CR; `data` lines join with LF; comments (`:`) and unknown fields are ignored.
 */
export class SseParser {
  /**
   * @param {(event: { id: string | undefined, event: string, data: string }) => void} onEvent
   *   `id` is set only when the event's own block carried an `id:` field.
   * @param {(ms: number) => void} [onRetry] the `retry:` reconnection time
   */
  constructor(onEvent, onRetry = () => undefined) {
    this.onEvent = onEvent;
    this.onRetry = onRetry;
    this.rest = '';
    this.reset();
  }

  /** @param {string} text */
  push(text) {
    const data = this.rest + text;
    const newline = /\r\n|\r|\n/g;
    let start = 0;
    let match;
    while ((match = newline.exec(data)) !== null) {
      // A CR that ends the chunk may be the first half of a CRLF: wait for the next chunk.
      if (match[0] === '\r' && match.index === data.length - 1) break;
      this.line(data.slice(start, match.index));
      start = match.index + match[0].length;
    }
    this.rest = data.slice(start);
  }

  /** @private */
  line(line) {
    if (line === '') {
      this.dispatch();
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.id = value;
    else if (field === 'retry' && /^[0-9]+$/.test(value)) this.onRetry(Number(value));
  }

  /** @private */
  dispatch() {
    const { id, event, data } = this;
    this.reset();
    if (data.length === 0) return;
    this.onEvent({ id, event: event === '' ? 'message' : event, data: data.join('\n') });
  }

  /** @private */
  reset() {
    this.id = undefined;
    this.event = '';
    /** @type {string[]} */
    this.data = [];
  }
}
