/**
 * What several instances need of their shared database beyond the session store: forest
 * leases, the cluster's package configuration, and notifications between instances. The
 * cluster declares this port; the PostgreSQL adapter implements it. The fences the database
 * checks every write against (fences.ts) are made before the store opens and handed to it.
 */
import type { Logger } from 'pino';
import type { PackageState } from '../domain/package-state.js';

/** Who holds an unexpired forest lease. */
export interface LeaseHolder {
  owner: string;
  ownerUrl: string;
  epoch: number;
  /** How long the lease still runs unless renewed (ms, by the database's clock). */
  expiresInMs: number;
}

export type LeaseResult = { owned: true; epoch: number } | { owned: false; ownerUrl: string };

/** The forest leases: which instance owns a forest, until when, at which epoch. */
export interface LeaseTable {
  /** Take a forest's lease for `ms`: free, expired or already ours; a takeover raises the epoch. */
  acquire(rootId: string, owner: string, ownerUrl: string, ms: number): Promise<LeaseResult>;
  /** Renew every lease held at these epochs; the roots whose lease was lost. */
  renew(owner: string, epochs: ReadonlyMap<string, number>, ms: number): Promise<string[]>;
  release(rootId: string, owner: string, epoch: number): Promise<void>;
  holder(rootId: string): Promise<LeaseHolder | undefined>;
  /** Of these forests, the ones another owner holds an unexpired lease on. */
  heldByOthers(rootIds: readonly string[], owner: string): Promise<string[]>;
  /** The other instances that hold an unexpired lease now: the ones with live agents. */
  otherHolders(owner: string): Promise<{ owner: string; ownerUrl: string }[]>;
}

export interface StoredPackages {
  version: number;
  /** The version of the last change that revoked `report` (0: none yet). */
  reportFence: number;
  state: PackageState;
}

/** An instance holding a live forest lease that has not confirmed a version. */
export interface UnconfirmedInstance {
  instanceId: string;
  url: string;
}

/** The cluster's package configuration: one versioned state, and the version each instance applied. */
export interface PackageTable {
  /** Store `initial` as version 1 unless a configuration exists; the stored one. */
  seed(initial: PackageState): Promise<StoredPackages>;
  read(): Promise<StoredPackages>;
  /** Change the state in one transaction (NOTIFYs PACKAGES_CHANGED at commit); the new version. */
  change(next: (current: PackageState) => PackageState): Promise<StoredPackages>;
  /** Record that this instance applied `version` (NOTIFYs PACKAGES_APPLIED). */
  confirm(instanceId: string, url: string, version: number): Promise<void>;
  /** Instances with a live lease that have not confirmed `version`. */
  unconfirmed(self: string, version: number): Promise<UnconfirmedInstance[]>;
}

/** NOTIFY channels: a new package version was committed; an instance applied a version. */
export const PACKAGES_CHANGED = 'agentforest_packages';
export const PACKAGES_APPLIED = 'agentforest_packages_applied';
/** NOTIFY channel: a batch that changed operator settings committed (payload: the kinds it changed, comma-separated). */
export const SETTINGS_CHANGED = 'agentforest_settings';

export interface ListenOptions {
  channels: readonly string[];
  onNotify: (channel: string, payload: string | undefined) => void;
  /** Called after every (re)connection once listening, the first one included: news sent meanwhile was lost. */
  onConnected: () => void;
  logger?: Logger | undefined;
}

/** A connection of its own that hears the channels it listens on, reconnecting when it drops. */
export interface Listener {
  /** Resolves once listening (or after the first failure, retrying in the background). */
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface ClusterDatabase {
  readonly leases: LeaseTable;
  readonly packages: PackageTable;
  notify(channel: string, payload: string): Promise<void>;
  listen(options: ListenOptions): Listener;
}

/** The leases this instance holds: the database commits a forest's rows only under them. */
export interface WriteFence {
  readonly owner: string;
  /** Fencing epoch per root this instance holds. */
  readonly epochs: ReadonlyMap<string, number>;
}

/** The package version this instance applied: a write delivering a report commits only if it is not behind. */
export interface ReportFence {
  applied(): number;
  /** The database refused a report write because this instance is behind. */
  behind(): void;
}

/** Both fences, made before the store opens. */
export interface ClusterFences {
  leases: WriteFence;
  packages: ReportFence;
}
