/**
 * The one place that knows the concrete stores: it opens the one the configuration names and
 * hands back the port. PostgreSQL when a database URL is given, else SQLite, or memory for
 * `:memory:`. With several instances on one database, the cluster's fences are made here first
 * and the store opens with them, so every write is checked from its first one.
 */
import { MemorySessionStore } from '../adapters/memory/memory-store.js';
import { PostgresSessionStore } from '../adapters/postgres/postgres-store.js';
import { SqliteSessionStore, type SqliteSyncMode } from '../adapters/sqlite/sqlite-store.js';
import type { ClusterOptions } from '../cluster/cluster-topology.js';
import { clusterFences } from '../cluster/fences.js';
import type { SessionStore } from '../sessions/session-store.js';

export interface StoreChoice {
  dataPath: string;
  databaseUrl?: string | undefined;
  synchronous?: SqliteSyncMode | undefined;
  /** With a database URL: this instance among several (the id its leases carry), and their duration. */
  cluster?: { instanceId: string; leaseMs: number; confirmMs?: number | undefined } | undefined;
}

export interface OpenedStore {
  store: SessionStore;
  /** Set when the store is shared by several instances. */
  cluster: ClusterOptions | undefined;
}

export async function openStore(choice: StoreChoice): Promise<OpenedStore> {
  if (choice.databaseUrl !== undefined) {
    if (choice.cluster === undefined) return { store: await PostgresSessionStore.open({ url: choice.databaseUrl }), cluster: undefined };
    return openClusterStore(choice.databaseUrl, choice.cluster);
  }
  if (choice.dataPath === ':memory:') return { store: new MemorySessionStore(), cluster: undefined };
  return { store: new SqliteSessionStore({ path: choice.dataPath, synchronous: choice.synchronous ?? 'full' }), cluster: undefined };
}

/** A PostgreSQL store shared by several instances: fences first, then the store with them. */
export async function openClusterStore(
  url: string,
  options: { instanceId: string; leaseMs: number; confirmMs?: number | undefined; pollMs?: number | undefined },
): Promise<{ store: PostgresSessionStore; cluster: ClusterOptions }> {
  const fences = clusterFences(options.instanceId);
  const store = await PostgresSessionStore.open({ url, fences });
  return { store, cluster: { database: store, fences, leaseMs: options.leaseMs, confirmMs: options.confirmMs, pollMs: options.pollMs } };
}
