/**
 * The work board, with several instances on one database: which other instances hold steps
 * that nobody there waits for, so a pool claim anywhere can be forwarded to one of them.
 *
 * An instance announces (NOTIFY on WORK_CHANNEL) when a step is parked for its pool, at most
 * every ANNOUNCE_MIN_MS, and again every ANNOUNCE_EVERY_MS while any is parked, with when its
 * oldest parked step was parked. A notice is kept until that instance answers a forwarded claim
 * with no step, or until it is older than NOTICE_TTL_MS (the instance stopped announcing).
 */
import type { Logger } from 'pino';
import type { Peer } from './peers.js';

export const WORK_CHANNEL = 'agentforest_work';

const ANNOUNCE_MIN_MS = 50;
const ANNOUNCE_EVERY_MS = 1_000;
const NOTICE_TTL_MS = 3 * ANNOUNCE_EVERY_MS;

interface Notice {
  peer: Peer;
  oldestAt: number;
  heardAt: number;
}

export interface WorkBoardDeps {
  instanceId: string;
  /** This instance's advertised URL (known for sure only once it listens). */
  url: () => string;
  /** When this instance's oldest parked pool step was parked, if one is. */
  oldestParkedAt: () => number | undefined;
  /** Send a payload on WORK_CHANNEL. */
  notify: (payload: string) => Promise<void>;
  logger?: Logger | undefined;
}

export class WorkBoard {
  private readonly notices = new Map<string, Notice>();
  private readonly listeners = new Set<() => void>();
  private lastAnnounced = 0;
  private announceTimer: NodeJS.Timeout | undefined;
  private repeatTimer: NodeJS.Timeout | undefined;

  constructor(private readonly deps: WorkBoardDeps) {}

  /** Re-announce while steps stay parked here. */
  start(): void {
    this.repeatTimer = setInterval(() => {
      if (this.deps.oldestParkedAt() !== undefined) this.announce();
    }, ANNOUNCE_EVERY_MS);
    this.repeatTimer.unref();
  }

  stop(): void {
    clearInterval(this.repeatTimer);
    clearTimeout(this.announceTimer);
  }

  /** A step was parked here for the pool: tell the others soon. */
  parked(): void {
    if (this.announceTimer !== undefined) return;
    const wait = Math.max(0, this.lastAnnounced + ANNOUNCE_MIN_MS - Date.now());
    this.announceTimer = setTimeout(() => {
      this.announceTimer = undefined;
      this.announce();
    }, wait);
    this.announceTimer.unref();
  }

  /** A notice on WORK_CHANNEL (this instance's own included, which is ignored). */
  heard(payload: string | undefined): void {
    const notice = parseNotice(payload);
    if (notice === undefined || notice.instanceId === this.deps.instanceId) return;
    this.notices.set(notice.instanceId, { peer: { instanceId: notice.instanceId, url: notice.url }, oldestAt: notice.oldestAt, heardAt: Date.now() });
    for (const listener of [...this.listeners]) listener();
  }

  /** The instances that announced work lately, the longest-waiting step first. */
  withWork(olderThan = Infinity): Peer[] {
    const now = Date.now();
    for (const [id, notice] of this.notices) if (now - notice.heardAt > NOTICE_TTL_MS) this.notices.delete(id);
    return [...this.notices.values()].filter((n) => n.oldestAt <= olderThan).sort((a, b) => a.oldestAt - b.oldestAt).map((n) => n.peer);
  }

  /** That instance had no step for a forwarded claim: forget its notice until it announces again. */
  drained(instanceId: string): void {
    this.notices.delete(instanceId);
  }

  /** Be told when another instance announces work; returns the unsubscribe. */
  onWork(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private announce(): void {
    const oldestAt = this.deps.oldestParkedAt();
    if (oldestAt === undefined) return;
    this.lastAnnounced = Date.now();
    const payload = JSON.stringify({ instanceId: this.deps.instanceId, url: this.deps.url(), oldestAt });
    this.deps.notify(payload).catch((err: unknown) => this.deps.logger?.warn({ err }, 'announcing pool work to the other instances failed'));
  }
}

function parseNotice(payload: string | undefined): { instanceId: string; url: string; oldestAt: number } | undefined {
  if (payload === undefined) return undefined;
  try {
    const value = JSON.parse(payload) as { instanceId?: unknown; url?: unknown; oldestAt?: unknown };
    if (typeof value.instanceId === 'string' && typeof value.url === 'string' && typeof value.oldestAt === 'number') {
      return { instanceId: value.instanceId, url: value.url, oldestAt: value.oldestAt };
    }
  } catch {
    // not a notice of ours
  }
  return undefined;
}
