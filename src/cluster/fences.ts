/**
 * The fences the database checks every write against, made before the store opens and handed
 * to it and to the cluster that keeps them (the same objects, through constructors):
 *
 * - LeaseFence: the forests this instance holds and at which epoch (kept by ownership.ts); a
 *   forest's rows commit only under its current lease.
 * - PackageFence: the package configuration version this instance applied (kept by
 *   cluster-packages.ts); a write delivering a report commits only if no later revocation of
 *   `report` is missing here.
 */
import type { ReportFence, WriteFence } from './cluster-database.js';

export class LeaseFence implements WriteFence {
  /** Fencing epoch per root this instance holds; ForestOwnership alone changes it. */
  readonly epochs = new Map<string, number>();

  constructor(readonly owner: string) {}
}

export class PackageFence implements ReportFence {
  private version = 0;
  private onBehind: (() => void) | undefined;

  applied(): number {
    return this.version;
  }

  /** The configuration at `version` is in force here; the version only grows. */
  advance(version: number): void {
    this.version = Math.max(this.version, version);
  }

  behind(): void {
    this.onBehind?.();
  }

  /** From the start of following the configuration on, a refused report write calls `reload`. */
  follow(reload: () => void): void {
    this.onBehind = reload;
  }
}

/** The fences of an instance with this id. */
export function clusterFences(instanceId: string): { leases: LeaseFence; packages: PackageFence } {
  return { leases: new LeaseFence(instanceId), packages: new PackageFence() };
}
