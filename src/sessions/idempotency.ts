/**
 * Idempotency keys: the same key from the same sender with the same request replays the
 * original result without a second effect; the same key with a different request is
 * IDEMPOTENCY_CONFLICT. A result is recorded through the session log in the same batch as the
 * writes of its effect (the operation calls `record` in the synchronous span of the effect,
 * before durability is awaited), so after a crash either both the effect and its key exist or
 * neither does; the record names the forest of the effect, so a write refused for that forest
 * (another instance took it over) leaves the key out with it. Keys expire after a configurable window. Concurrent requests with one key run
 * one at a time: the second waits and then replays.
 */
import { createHash } from 'node:crypto';
import { ServiceError } from '../domain/errors.js';
import type { Clock } from '../domain/ports.js';
import type { SessionLog } from './session-log.js';

export const DEFAULT_IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

export interface IdempotencyRequest {
  key: string;
  /** A hash of the route and the request body. */
  fingerprint: string;
}

/** Who uses a key: the sender, and the forest the operation writes to. */
export interface IdempotencyCaller {
  /** `operator`, or the sending agent's id. */
  sender: string;
  rootId: string;
}

export interface IdempotentResult<T> {
  body: T;
  replayed: boolean;
}

export class IdempotencyKeys {
  private readonly inflight = new Map<string, Promise<unknown>>();

  constructor(
    private readonly log: SessionLog,
    private readonly clock: Clock,
    readonly ttlMs: number = DEFAULT_IDEMPOTENCY_TTL_MS,
  ) {}

  /**
   * Run `op` at most once per (sender, key). `op` receives `record(body)`, to call right after
   * its effect and before it awaits durability. Without a request, `op` just runs.
   */
  async run<T>(
    caller: IdempotencyCaller,
    request: IdempotencyRequest | undefined,
    status: number,
    op: (record: (body: T) => void) => Promise<T>,
  ): Promise<IdempotentResult<T>> {
    if (request === undefined) return { body: await op(() => undefined), replayed: false };
    const { sender, rootId } = caller;
    const slot = `${sender}\u0000${request.key}`;
    for (;;) {
      const running = this.inflight.get(slot);
      if (running !== undefined) {
        await running.catch(() => undefined);
        continue;
      }
      await this.log.durable(rootId);
      const stored = await this.log.store.idempotency(sender, request.key, this.clock.now());
      if (stored !== undefined) {
        if (stored.fingerprint !== request.fingerprint) {
          throw new ServiceError(
            'IDEMPOTENCY_CONFLICT',
            `Idempotency-Key "${request.key}" was already used with a different request; use a new key for a new request`,
          );
        }
        return { body: stored.response as T, replayed: true };
      }
      if (this.inflight.has(slot)) continue; // another request claimed the key while we looked
      const work = op((body) => {
        const now = this.clock.now();
        this.log.putIdempotency({
          sender,
          key: request.key,
          fingerprint: request.fingerprint,
          status,
          response: body,
          createdAt: now,
          expiresAt: now + this.ttlMs,
          rootId,
        });
      });
      this.inflight.set(slot, work);
      try {
        return { body: await work, replayed: false };
      } finally {
        this.inflight.delete(slot);
      }
    }
  }

  /** Drop expired keys; returns how many. */
  async expire(): Promise<number> {
    return this.log.store.expireIdempotency(this.clock.now());
  }
}

/** A stable hash of a request: the route and the body with object keys sorted. */
export function fingerprint(route: string, body: unknown): string {
  return createHash('sha256').update(route).update('\u0000').update(stableJson(body)).digest('base64url');
}

function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.keys(value as Record<string, unknown>)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${stableJson((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
