/**
 * A resumable event stream over fetch (EventSource cannot send the Authorization header): the
 * body is read as it arrives and parsed as Server-Sent Events. When the connection drops, it
 * reconnects after the server's `retry:` time (longer after repeated failures) with
 * `Last-Event-ID` set to the last id received, so the service replays exactly what was missed:
 * nothing lost, nothing repeated. A connection silent for longer than WATCHDOG_MS (several
 * heartbeats) is taken for dead and replaced.
 */
import { ApiError, authorizedFetch, sleep } from './api.js';
import { SseParser } from './sse-parser.js';

const WATCHDOG_MS = 60_000;
const MAX_BACKOFF_MS = 30_000;

/**
 * @typedef {'connecting' | 'live' | 'reconnecting' | 'failed'} StreamState
 * @param {{
 *   path: string,
 *   onEvent: (event: { id: string | undefined, event: string, data: unknown }) => void,
 *   onState: (state: StreamState, error?: Error) => void,
 * }} options
 * @returns {{ stop: () => void }}
 */
export function followEvents({ path, onEvent, onState }) {
  /** @type {string | undefined} */
  let lastId;
  let retryMs = 2_000;
  let stopped = false;
  /** @type {AbortController | undefined} */
  let connection;

  /** One connection, until it ends: `live` once it was answered 200; `final` for an error retrying cannot fix. */
  const connect = async () => {
    connection = new AbortController();
    let live = false;
    let watchdog;
    const alive = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => connection?.abort(), WATCHDOG_MS);
    };
    try {
      const headers = { accept: 'text/event-stream' };
      if (lastId !== undefined) headers['last-event-id'] = lastId;
      const response = await authorizedFetch(path, { headers, cache: 'no-store', signal: connection.signal });
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        return { live, error: new ApiError(response.status, body), final: response.status === 404 || response.status === 400 };
      }
      live = true;
      onState('live');
      alive();
      const parser = new SseParser(
        (event) => {
          // The id counts as received once the event is handled: a reconnect resumes after it.
          try {
            onEvent({ id: event.id, event: event.event, data: JSON.parse(event.data) });
          } catch (error) {
            // One event that cannot be shown must not stop the stream, nor replay it forever.
            console.error('an event could not be shown', error);
          }
          if (event.id !== undefined) lastId = event.id;
        },
        (ms) => {
          retryMs = ms;
        },
      );
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        alive();
        parser.push(value);
      }
      return { live };
    } catch (error) {
      return { live, error: error instanceof Error ? error : new Error(String(error)), final: false };
    } finally {
      clearTimeout(watchdog);
    }
  };

  const run = async () => {
    let failures = 0;
    onState('connecting');
    while (!stopped) {
      const result = await connect();
      if (stopped) return;
      if (result.final) {
        onState('failed', result.error);
        return;
      }
      // A stream that was live and ended starts the count again; failing to connect backs off.
      failures = result.live ? 0 : failures + 1;
      onState('reconnecting', result.error);
      await sleep(Math.min(retryMs * 2 ** failures, MAX_BACKOFF_MS));
    }
  };
  void run();

  return {
    stop() {
      stopped = true;
      connection?.abort();
    },
  };
}
