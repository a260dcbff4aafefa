/**
 * One package configuration for every instance on one PostgreSQL database. The configuration
 * is a versioned row (cluster-database.ts's PackageTable, in the PostgreSQL adapter); the
 * environment only seeds a fresh database. This instance applies every new version at once: a NOTIFY wakes it (on a
 * connection of its own, reconnecting if it drops), and a periodic version check catches what
 * a lost notification missed. After applying a version it records so and NOTIFYs.
 *
 * A change made here commits first, then is applied here, then waits (at most `confirmMs`)
 * until every other instance holding a live forest lease applied it; the answer names those
 * that did not. Such an instance is behind, and cannot know it: the database refuses its
 * writes that deliver a report while it has not applied the last revocation of `report`
 * (PostgresPackages.checkReports), and it reloads the configuration at once when refused.
 *
 * Invariant: `applied` only grows, and the PackageManager matches the state of that version.
 */
import type { Logger } from 'pino';
import type { PackageConfig, PackageChangeView, PackageView } from '../contract/index.js';
import { changedState, requirePackage, type PackageChange } from '../domain/package-state.js';
import type { PackageChanges } from '../tools/packages/package-changes.js';
import type { PackageManager } from '../tools/packages/package-manager.js';
import { PACKAGES_APPLIED, PACKAGES_CHANGED, type ClusterDatabase, type Listener, type StoredPackages, type UnconfirmedInstance } from './cluster-database.js';
import type { PackageFence } from './fences.js';

export interface ClusterPackagesOptions {
  /** This instance's id in forest leases. */
  instanceId: string;
  /** How long a change waits for the other instances to confirm it. */
  confirmMs: number;
  /** The fallback version check's period. */
  pollMs: number;
}

export interface ClusterPackagesDeps {
  /** This process's packages (read when a version is applied: built after the topology). */
  manager: () => PackageManager;
  database: ClusterDatabase;
  /** The version applied here, which the database checks report writes against. */
  fence: PackageFence;
  logger?: Logger | undefined;
}

export const DEFAULT_CONFIRM_MS = 5_000;
export const DEFAULT_POLL_MS = 3_000;

/** While waiting for confirmations, the database is asked again at least this often (a lost NOTIFY). */
const RECHECK_MS = 100;

export class ClusterPackages implements PackageChanges {
  /** The highest version recorded as applied in the database. */
  private confirmed = 0;
  /** The URL this instance advertises (given at start: it may be known only once listening). */
  private url: () => string = () => '';
  private listener: Listener | undefined;
  private poll: NodeJS.Timeout | undefined;
  /** Reloads run one after another, so versions are read and applied in order. */
  private reloads: Promise<void> = Promise.resolve();
  private readonly waiters = new Set<() => void>();

  constructor(
    private readonly deps: ClusterPackagesDeps,
    private readonly options: ClusterPackagesOptions,
  ) {}

  /** The version the PackageManager matches (0: none yet). */
  private get applied(): number {
    return this.deps.fence.applied();
  }

  /** Seed a fresh database with this process's configuration, or adopt the stored one; then follow it. */
  async start(url: () => string): Promise<void> {
    this.url = url;
    this.deps.fence.follow(() => {
      this.deps.logger?.warn({ applied: this.applied }, 'a report write was refused: this instance is behind the package configuration; reloading it');
      void this.reload();
    });
    this.adopt(await this.deps.database.packages.seed(this.deps.manager().state()));
    await this.confirm();
    this.listener = this.deps.database.listen({
      channels: [PACKAGES_CHANGED, PACKAGES_APPLIED],
      onNotify: (channel) => (channel === PACKAGES_CHANGED ? void this.reload() : this.wake()),
      // Notifications sent while disconnected are lost: read the row again.
      onConnected: () => void this.reload(),
      logger: this.deps.logger,
    });
    await this.listener.start();
    this.poll = setInterval(() => void this.reload(), this.options.pollMs);
    this.poll.unref();
  }

  /** Stop following the configuration (the LISTEN and the version check); a refused report write still reloads it. */
  async stop(): Promise<void> {
    if (this.poll !== undefined) clearInterval(this.poll);
    this.poll = undefined;
    await this.listener?.stop();
    this.wake();
  }

  list(): PackageView[] {
    return this.deps.manager().list();
  }

  install(name: string, config: PackageConfig): Promise<PackageChangeView> {
    return this.change({ kind: 'install', name, config });
  }

  uninstall(name: string): Promise<PackageChangeView> {
    return this.change({ kind: 'uninstall', name });
  }

  /** Read the stored configuration and apply it if it is newer; never throws (the next check retries). */
  reload(): Promise<void> {
    this.reloads = this.reloads.then(async () => {
      try {
        const stored = await this.deps.database.packages.read();
        try {
          this.adopt(stored);
        } finally {
          await this.confirm();
        }
      } catch (err) {
        this.deps.logger?.error({ err }, 'reading or applying the package configuration failed; the next check retries');
      }
    });
    return this.reloads;
  }

  private async change(change: PackageChange): Promise<PackageChangeView> {
    const name = requirePackage(change.name);
    const stored = await this.deps.database.packages.change((current) => changedState(current, change));
    let failure: { error: unknown } | undefined;
    try {
      this.adopt(stored);
    } catch (error) {
      failure = { error };
    }
    await this.confirm().catch((err: unknown) => this.deps.logger?.error({ err }, 'recording the applied package configuration failed; the next check retries'));
    const unconfirmed = await this.awaitConfirmations(stored.version);
    if (unconfirmed.length > 0) {
      this.deps.logger?.warn({ version: stored.version, unconfirmed }, 'instances did not confirm a package change in time; they cannot deliver reports until they apply it');
    }
    if (failure !== undefined) throw failure.error;
    return unconfirmed.length === 0 ? this.deps.manager().view(name) : { ...this.deps.manager().view(name), unconfirmed };
  }

  /** Apply a stored version if it is newer than the one applied (in one synchronous span). */
  private adopt(stored: StoredPackages): void {
    if (stored.version <= this.applied) return;
    try {
      this.deps.manager().apply(stored.state);
    } finally {
      this.deps.fence.advance(stored.version);
    }
  }

  /** Record the applied version in the database when it is not recorded yet. */
  private async confirm(): Promise<void> {
    const version = this.applied;
    if (version <= this.confirmed) return;
    await this.deps.database.packages.confirm(this.options.instanceId, this.url(), version);
    this.confirmed = Math.max(this.confirmed, version);
  }

  /** Wait until every other instance with a live lease applied `version`, or `confirmMs` passed; who did not. */
  private async awaitConfirmations(version: number): Promise<UnconfirmedInstance[]> {
    const deadline = Date.now() + this.options.confirmMs;
    for (;;) {
      const missing = await this.deps.database.packages.unconfirmed(this.options.instanceId, version);
      const left = deadline - Date.now();
      if (missing.length === 0 || left <= 0) return missing;
      await this.nextConfirmation(Math.min(RECHECK_MS, left));
    }
  }

  /** Resolves at the next confirmation NOTIFY, or after `ms`. */
  private nextConfirmation(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
    });
  }

  private wake(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}
