/**
 * What the package routes call. With one process (the memory and SQLite stores, or PostgreSQL
 * without forest leases) a change is this process's own (localPackageChanges); with several
 * instances on one PostgreSQL database it is the cluster's (src/cluster/cluster-packages.ts).
 */
import type { PackageConfig, PackageChangeView, PackageView } from '../../contract/index.js';
import type { PackageManager } from './package-manager.js';

export interface PackageChanges {
  list(): PackageView[];
  /** Install or reconfigure; resolves once the change is in force where it must be. */
  install(name: string, config: PackageConfig): Promise<PackageChangeView>;
  uninstall(name: string): Promise<PackageChangeView>;
}

/** Changes of this process's PackageManager alone: in force when they return. */
export function localPackageChanges(manager: () => PackageManager): PackageChanges {
  return {
    list: () => manager().list(),
    install: (name, config) => Promise.resolve().then(() => manager().install(name, config)),
    uninstall: (name) => Promise.resolve().then(() => manager().uninstall(name)),
  };
}
