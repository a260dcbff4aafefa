/**
 * Forest ownership across instances on one PostgreSQL database. Authority stays in-process (a
 * report goes to the live parent in the same process), so the unit of placement is the forest:
 * every live agent of one root lives in the instance that holds the root's lease.
 *
 * A lease is a row (owner, advertised URL, epoch, expiry). An instance takes it when it creates
 * or resumes a root, renews it every third of its duration, and gives it up when the root is
 * disposed or the instance stops. A lease that expired (its owner died or paused) can be taken
 * over by another instance, which raises the epoch; the store checks the epoch inside every
 * write's transaction, so a paused old owner's writes to it are left out by the database (the
 * rest of the commit lands), and it drops the forest when it notices.
 */
import type { Logger } from 'pino';
import { ServiceError } from '../domain/errors.js';
import type { ForestOwner, ForestPlacement } from '../topology/topology.js';
import type { LeaseTable } from './cluster-database.js';
import type { LeaseFence } from './fences.js';

/** What the ownership asks of the rest of the instance. */
export interface OwnershipDeps {
  /** Told about forests whose lease this instance lost: their live agents must go. */
  onLost: (roots: readonly string[]) => void;
  /** How many agents of each forest are live here (see releaseIfIdle). */
  liveInForest: (rootId: string) => number;
  /** Waits until every write accepted so far committed; rejects if this forest's were refused. */
  durable: (rootId: string) => Promise<void>;
  logger?: Logger;
}

export class ForestOwnership implements ForestPlacement {
  readonly exclusive = false;
  readonly instanceId: string;
  /** The fence's epochs: every write is checked against them (kept here alone). */
  private readonly epochs: Map<string, number>;
  private timer: NodeJS.Timeout | undefined;
  /** The base URL clients reach this instance at, written into the leases it takes (see start). */
  private url: () => string = () => {
    throw new Error('forest ownership is not started');
  };

  constructor(
    private readonly leases: LeaseTable,
    fence: LeaseFence,
    private readonly leaseMs: number,
    private readonly deps: OwnershipDeps,
  ) {
    this.instanceId = fence.owner;
    this.epochs = fence.epochs;
  }

  /** Take the forest's lease, or throw 421 MISDIRECTED naming the instance that holds it. */
  async acquire(rootId: string): Promise<void> {
    const result = await this.leases.acquire(rootId, this.instanceId, this.url(), this.leaseMs);
    if (!result.owned) throw misdirected(rootId, result.ownerUrl);
    this.epochs.set(rootId, result.epoch);
  }

  holds(rootId: string): boolean {
    return this.epochs.has(rootId);
  }

  async leased<T>(rootId: string, work: () => Promise<T>): Promise<T> {
    const borrowed = !this.holds(rootId);
    if (borrowed) await this.acquire(rootId);
    try {
      return await work();
    } finally {
      if (borrowed) await this.releaseIfIdle(rootId);
    }
  }

  /**
   * Give the lease up once no agent of the forest is live here, after the forest's writes
   * committed (a write after the release would be fenced). The epoch is read before waiting:
   * if the forest was resumed here meanwhile (a new epoch), that lease stays.
   */
  async releaseIfIdle(rootId: string): Promise<void> {
    const epoch = this.epochs.get(rootId);
    if (epoch === undefined || this.deps.liveInForest(rootId) > 0) return;
    await this.deps.durable(rootId);
    if (this.epochs.get(rootId) !== epoch || this.deps.liveInForest(rootId) > 0) return;
    await this.release(rootId, epoch);
  }

  private async release(rootId: string, epoch: number): Promise<void> {
    this.epochs.delete(rootId);
    await this.leases.release(rootId, this.instanceId, epoch).catch((err: unknown) => {
      this.deps.logger?.warn({ err, rootId }, 'releasing a forest lease failed; it will expire');
    });
  }

  /** The instance that holds this forest's unexpired lease, when that is another instance. */
  async ownerElsewhere(rootId: string): Promise<ForestOwner | undefined> {
    if (this.epochs.has(rootId)) return undefined;
    const holder = await this.leases.holder(rootId);
    return holder !== undefined && holder.owner !== this.instanceId ? holder : undefined;
  }

  /** Of these forests, the ones another instance holds now (it runs them). */
  async heldElsewhere(rootIds: readonly string[]): Promise<Set<string>> {
    return new Set(await this.leases.heldByOthers(rootIds, this.instanceId));
  }

  /** The other instances holding forests now (each has live agents), at their advertised URLs. */
  async peers(): Promise<{ instanceId: string; url: string }[]> {
    const holders = await this.leases.otherHolders(this.instanceId);
    return holders.map((h) => ({ instanceId: h.owner, url: h.ownerUrl }));
  }

  /** Renew the held leases every third of their duration; `url`: where clients reach this instance. */
  start(url: () => string): void {
    this.url = url;
    this.timer = setInterval(() => void this.renew(), Math.max(50, Math.floor(this.leaseMs / 3)));
    this.timer.unref();
  }

  async renew(): Promise<void> {
    try {
      const lost = await this.leases.renew(this.instanceId, this.epochs, this.leaseMs);
      if (lost.length > 0) this.lost(lost);
    } catch (err) {
      this.deps.logger?.error({ err }, 'renewing forest leases failed; they expire unless a later renewal succeeds');
    }
  }

  /** Forget forests this instance no longer owns (a failed renewal or a fenced write). */
  lost(roots: readonly string[]): void {
    const held = roots.filter((r) => this.epochs.delete(r));
    if (held.length === 0) return;
    this.deps.logger?.error({ roots: held }, 'lost the lease of forests: another instance owns them now; dropping their live agents');
    this.deps.onLost(held);
  }

  /** Stop renewing and give every lease up (a graceful stop). */
  async stop(): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer);
    await Promise.all([...this.epochs].map(([root, epoch]) => this.release(root, epoch)));
  }
}

export function misdirected(rootId: string, ownerUrl: string): ServiceError {
  return new ServiceError('MISDIRECTED', `forest "${rootId}" is owned by the instance at ${ownerUrl}; send the request there`, {
    location: ownerUrl,
  });
}
