/**
 * The continuable-child setup registry: deployment contributions (such as the report tool)
 * that install child-scoped capabilities into every new Activation, fresh or cold-resumed.
 *
 * It owns registration order, per-child installation records, setup rollback, child-scope
 * cleanup and immediate revocation. `apply` installs the current contributions into an
 * unpublished child scope and returns an AgentSetupCommit; the agent factory calls `commit()`
 * synchronously right before publishing. A contribution removed between apply and commit
 * invalidates the batch, so `commit()` throws ACTIVATION_SETUP_REVOKED and nothing is
 * published. Removal after commit is live revocation. Every release path attempts every
 * disposer and aggregates failures into ACTIVATION_SETUP_RELEASE_FAILED.
 */
import { ServiceError } from '../domain/errors.js';

/** Installs a capability into a child scope; returns the disposer that removes it. */
export type SetupContribution<S> = (scope: S) => () => void;

export interface AgentSetupCommit {
  /** Synchronous; throws ACTIVATION_SETUP_REVOKED when the batch was invalidated. */
  commit(): void;
}

export const REVOKED_MESSAGE =
  'a continuable-subagent setup contribution was revoked while this child was being built; the child was not established';

type ReleaseContext = 'contribution removal' | 'setup rollback' | 'child scope disposal';

interface Batch {
  invalidated: boolean;
  /** True until commit(): releasing a provisional installation invalidates its batch. */
  provisional: boolean;
}

interface Installation<S> {
  registration: Registration<S>;
  scope: S;
  batch: Batch;
  dispose: () => void;
  released: boolean;
}

interface Registration<S> {
  contribution: SetupContribution<S>;
  removed: boolean;
  installations: Set<Installation<S>>;
}

export class ActivationSetupRegistry<S extends object> {
  private readonly registrations: Registration<S>[] = [];
  private readonly byScope = new WeakMap<S, Set<Installation<S>>>();

  /** Register a contribution (after all earlier ones); returns its idempotent removal. */
  register(contribution: SetupContribution<S>): () => void {
    const registration: Registration<S> = { contribution, removed: false, installations: new Set() };
    this.registrations.push(registration);
    return () => this.remove(registration);
  }

  get size(): number {
    return this.registrations.length;
  }

  /**
   * Install every live contribution into `scope`, in registration order. On a throw the
   * installed part of the batch is released (rollback errors are swallowed: the original
   * error is what the caller needs) and the error is rethrown.
   */
  apply(scope: S): AgentSetupCommit {
    const batch: Batch = { invalidated: false, provisional: true };
    const installed: Installation<S>[] = [];
    try {
      for (const registration of [...this.registrations]) {
        if (registration.removed) continue;
        const dispose = registration.contribution(scope);
        const installation: Installation<S> = { registration, scope, batch, dispose, released: false };
        installed.push(installation);
        registration.installations.add(installation);
        this.scopeSet(scope).add(installation);
        // The contribution removed itself while installing: undo it now.
        if (registration.removed) this.releaseOne(installation);
      }
    } catch (error) {
      for (const installation of installed) {
        try {
          this.releaseOne(installation);
        } catch {
          // Rollback failures are secondary to the error that caused the rollback.
        }
      }
      throw error;
    }
    return {
      commit: () => {
        if (batch.invalidated) throw new ServiceError('ACTIVATION_SETUP_REVOKED', REVOKED_MESSAGE);
        batch.provisional = false;
      },
    };
  }

  /** Release every installation in a child scope (the child closed or settled). Idempotent. */
  releaseScope(scope: S): void {
    const installations = [...(this.byScope.get(scope) ?? [])];
    this.byScope.delete(scope);
    this.releaseAll(installations, 'child scope disposal');
  }

  private remove(registration: Registration<S>): void {
    if (registration.removed) return;
    // Closed to new setup before releasing, so a snapshotted apply cannot install after this returns.
    registration.removed = true;
    const index = this.registrations.indexOf(registration);
    if (index !== -1) this.registrations.splice(index, 1);
    this.releaseAll([...registration.installations], 'contribution removal');
  }

  private releaseAll(installations: readonly Installation<S>[], during: ReleaseContext): void {
    const failures: unknown[] = [];
    for (const installation of installations) {
      try {
        this.releaseOne(installation);
      } catch (error) {
        failures.push(error);
      }
    }
    if (failures.length > 0) {
      const chains = failures.map(describeChain).join('; ');
      throw new ServiceError(
        'ACTIVATION_SETUP_RELEASE_FAILED',
        `continuable-subagent setup ${during} failed to release ${failures.length} installation(s): ${chains}`,
        { cause: failures.length === 1 ? failures[0] : new AggregateError(failures) },
      );
    }
  }

  private releaseOne(installation: Installation<S>): void {
    if (installation.released) return;
    installation.released = true;
    installation.registration.installations.delete(installation);
    this.byScope.get(installation.scope)?.delete(installation);
    if (installation.batch.provisional) installation.batch.invalidated = true;
    installation.dispose();
  }

  private scopeSet(scope: S): Set<Installation<S>> {
    let set = this.byScope.get(scope);
    if (set === undefined) {
      set = new Set();
      this.byScope.set(scope, set);
    }
    return set;
  }
}

function describeChain(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current !== undefined && depth < 5; depth++) {
    parts.push(current instanceof Error ? current.message : String(current));
    current = current instanceof Error ? current.cause : undefined;
  }
  return parts.join(' <- ');
}
