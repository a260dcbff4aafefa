/**
 * A work board, with several instances on one database: news that an instance has parked work
 * (a step, a tool call) nobody there waits for, so pool claims waiting on the other instances
 * wake and look. It carries no state to trust: a woken claim asks the instances what they hold
 * (cluster-pool.ts). Each pool has its own board and channel.
 *
 * An instance announces (NOTIFY on the board's channel, its id as the payload) when work is
 * parked for its pool, at most every ANNOUNCE_MIN_MS, and again every ANNOUNCE_EVERY_MS while
 * any stays parked, so a notice lost with a dropped connection costs a second at most.
 */
import type { Logger } from 'pino';

/** The step pool's channel. */
export const WORK_CHANNEL = 'agentforest_work';
/** The tool worker pool's channel. */
export const TOOL_WORK_CHANNEL = 'agentforest_tool_work';

const ANNOUNCE_MIN_MS = 20;
const ANNOUNCE_EVERY_MS = 1_000;

export interface WorkBoardDeps {
  instanceId: string;
  /** Whether work is parked here for the pool. */
  hasParked: () => boolean;
  /** Send a payload on the board's channel. */
  notify: (payload: string) => Promise<void>;
  logger?: Logger | undefined;
}

export class WorkBoard {
  /** Stopped: a step parked during the stop (agents shutting down) is announced no more. */
  private stopped = false;
  private readonly listeners = new Set<() => void>();
  private lastAnnounced = 0;
  private announceTimer: NodeJS.Timeout | undefined;
  private repeatTimer: NodeJS.Timeout | undefined;

  constructor(private readonly deps: WorkBoardDeps) {}

  /** Re-announce while work stays parked here. */
  start(): void {
    if (this.repeatTimer !== undefined) return;
    this.repeatTimer = setInterval(() => {
      if (this.deps.hasParked()) this.announce();
    }, ANNOUNCE_EVERY_MS);
    this.repeatTimer.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.repeatTimer);
    this.repeatTimer = undefined;
    clearTimeout(this.announceTimer);
    this.announceTimer = undefined;
  }

  /** Work was parked here for the pool: tell the others soon. */
  parked(): void {
    if (this.stopped || this.announceTimer !== undefined) return;
    const wait = Math.max(0, this.lastAnnounced + ANNOUNCE_MIN_MS - Date.now());
    this.announceTimer = setTimeout(() => {
      this.announceTimer = undefined;
      if (this.deps.hasParked()) this.announce();
    }, wait);
    this.announceTimer.unref();
  }

  /** A notice on the board's channel; this instance's own are ignored. */
  heard(payload: string | undefined): void {
    if (payload === undefined || payload === this.deps.instanceId) return;
    for (const listener of [...this.listeners]) listener();
  }

  /** Be told when another instance announces work; returns the unsubscribe. */
  onWork(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private announce(): void {
    this.lastAnnounced = Date.now();
    this.deps.notify(this.deps.instanceId).catch((err: unknown) => this.deps.logger?.warn({ err }, 'announcing pool work to the other instances failed'));
  }
}
