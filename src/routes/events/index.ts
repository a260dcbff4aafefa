/**
 * Server-Sent Events: an agent's (or, with `forest=true`, a root's whole forest's) durable
 * session entries and status changes. Entry events carry `id:` = the durable position (the
 * session seq; the forest seq for a forest stream), so `Last-Event-ID` (or `?after=`) resumes
 * with no gap and no duplicate. Heartbeat comments keep idle connections open; a consumer that
 * falls too far behind is cut off and resumes from its last id.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { EventStreams, StreamEvent } from '../../observation/event-stream.js';
import type { EventHub } from '../../observation/event-hub.js';
import { AgentIdParams, errorResponses, OPERATOR_SECURITY } from '../common-schemas.js';
import { exactInteger } from '../../contract/index.js';
import { MESSAGES, ServiceError } from '../../domain/errors.js';

export interface EventRoutesOptions {
  streams: EventStreams;
  hub: EventHub;
  heartbeatMs: number;
  /** Bytes a consumer may leave unread in its socket buffer before it is cut off. */
  maxBufferedBytes: number;
}

/** Bytes of backlog over which a consumer's deltas are dropped (its entries still go out). */
export function deltaBoundOf(maxBufferedBytes: number): number {
  return Math.min(65_536, Math.floor(maxBufferedBytes / 4));
}

const EventsQuery = Type.Object(
  {
    forest: Type.Optional(Type.Boolean({ default: false, description: "Stream the whole forest of this root (ids are the forest's positions)." })),
    after: Type.Optional(exactInteger({ minimum: 0, description: 'Resume after this event id (Last-Event-ID takes precedence).' })),
    deltas: Type.Optional(Type.Boolean({ default: false, description: 'Also send `delta` events: the pieces of answers being written (never replayed).' })),
  },
  { additionalProperties: false },
);

const EventsHeaders = Type.Object({
  'last-event-id': Type.Optional(Type.String({ pattern: '^[0-9]{1,15}$', description: 'The id of the last event received; the stream resumes after it.' })),
});

export function formatEvent(event: StreamEvent): string {
  const id = event.id === undefined ? '' : `id: ${event.id}\n`;
  return `${id}event: ${event.event}\ndata: ${JSON.stringify(event.data)}\n\n`;
}

export const eventRoutes: FastifyPluginAsyncTypebox<EventRoutesOptions> = async (app, options) => {
  const { streams, hub } = options;
  app.get('/v1/agents/:id/events', {
    schema: {
      tags: ['events'],
      operationId: 'streamEvents',
      summary: "Follow an agent's (or a forest's) events",
      description:
        'text/event-stream. `event: entry` carries `{agentId, entry}` with `id:` = the entry\'s seq (forest: its forest ' +
        'position); `event: status` carries `{agentId, status, resident, inbox, staged, claimable}` snapshots without an id ' +
        '(sent at connect and on change; `claimable` tells a parked driver to claim a step); `event: budget-exhausted` carries ' +
        '`{agentId, pausedBy: {agentId, budget}}` once when a budget pauses an agent (no id, not replayed). An approval entry is sent as ' +
        '`event: approval-requested` (pending) or `event: approval-decided` (approved, denied, expired, cancelled), the approval as its data, ' +
        'with its position as `id:` like an entry. With `?deltas=true`, `event: delta` carries ' +
        '`{agentId, stepId, attempt, seq, text?, toolCall?: {index, id?, name?, argumentsDelta?}, reset?}` while an answer is being ' +
        'written (no id, never replayed; `seq` counts from 1 per step attempt; `reset: true`: drop what this step\'s earlier deltas built); a ' +
        'consumer that is behind has deltas dropped first and then gets `event: deltas-dropped` with `{count}` before its next event. Comments (`: ping`) are ' +
        'heartbeats. Resume with `Last-Event-ID` or `?after=`. A consumer that falls behind is disconnected with a final ' +
        '`: slow consumer` comment and resumes from its last id; the stream also ends when the service drains.',
      security: OPERATOR_SECURITY,
      params: AgentIdParams,
      querystring: EventsQuery,
      headers: EventsHeaders,
      response: {
        200: { description: 'An event stream.', content: { 'text/event-stream': { schema: { type: 'string' } } } },
        ...errorResponses(['AGENT_NOT_FOUND', 'AGENT_BUSY', 'DRAINING'], { bodyless: true }),
      },
    },
  }, async (request, reply) => {
    if (hub.closed) throw new ServiceError('DRAINING', MESSAGES.serviceDraining);
    const target = { id: request.params.id, forest: request.query.forest ?? false, deltas: request.query.deltas ?? false };
    const deltaBound = deltaBoundOf(options.maxBufferedBytes);
    await streams.resolve(target);
    const header = request.headers['last-event-id'];
    const after = typeof header === 'string' ? Number(header) : (request.query.after ?? 0);
    const leave = streams.admit(target);

    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      'x-request-id': request.id,
    });
    res.write('retry: 2000\n\n');
    let ended = false;
    let unsubscribe: (() => void) | undefined;
    /**
     * A replay waiting for the backlog to fall to the limit. Each event's write callback (run
     * once its bytes reach the socket) checks; the response's 'drain' would not do: it comes only
     * after a write passed the stream's high-water mark (64 KiB from Node 22), which a smaller
     * limit never reaches.
     */
    let waiting: (() => void) | undefined;
    const wake = (): void => {
      const resume = waiting;
      waiting = undefined;
      resume?.();
    };
    const flushed = (): void => {
      if (waiting !== undefined && res.writableLength <= options.maxBufferedBytes) wake();
    };
    const onRevoked = (): void => end('the key was revoked');
    const end = (note?: string): void => {
      if (ended) return;
      ended = true;
      request.keyRevoked?.removeEventListener('abort', onRevoked);
      clearInterval(heartbeat);
      unregister();
      unsubscribe?.();
      if (!res.writableEnded) res.end(note === undefined ? undefined : `: ${note}\n\n`);
      wake();
    };
    const heartbeat = setInterval(() => {
      if (!ended) res.write(': ping\n\n');
    }, options.heartbeatMs);
    heartbeat.unref();
    const unregister = hub.onClose(() => end('the service is draining; resume with Last-Event-ID elsewhere'));
    res.once('close', () => end());
    // A tenant key's stream ends when the key is revoked.
    request.keyRevoked?.addEventListener('abort', onRevoked, { once: true });
    const sink = {
      send: (event: StreamEvent): boolean => {
        if (ended) return true;
        // The backlog before this event decides, so one large event never cuts a prompt reader
        // off, and a consumer that is behind is never handed more than the limit plus one event.
        if (res.writableLength > options.maxBufferedBytes) return false;
        res.write(formatEvent(event), flushed);
        return true;
      },
      takesDeltas: (events: readonly StreamEvent[]): boolean => {
        if (res.writableLength > deltaBound) return false;
        // One piece (at most 64 KiB) goes on the bound alone. A list goes only if the backlog
        // with it stays within half the buffer: deltas never leave an entry without room.
        if (events.length === 1) return true;
        let bytes = res.writableLength;
        for (const event of events) {
          bytes += Buffer.byteLength(formatEvent(event));
          if (bytes > options.maxBufferedBytes / 2) return false;
        }
        return true;
      },
      drained: (): Promise<void> =>
        ended || res.writableLength <= options.maxBufferedBytes ? Promise.resolve() : new Promise<void>((resolve) => {
          waiting = resolve;
        }),
    };
    try {
      unsubscribe = await streams.start(target, after, sink, () => end('slow consumer; resume with Last-Event-ID'), leave);
      if (ended) unsubscribe();
    } catch (error) {
      request.log.error({ err: error }, 'event stream failed');
      end('the stream failed; resume with Last-Event-ID');
    }
  });
};
