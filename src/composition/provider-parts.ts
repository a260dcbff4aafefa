/**
 * The model providers' gate as the composition builds it: what holds a provider (its back-off,
 * its full window of AGENTFOREST_MODEL_LIMITS), read by the driver lane's gate and by every
 * model request, and the sharing of both through the store. A back-off heard here is counted
 * in the metrics (a driver event) and put in the store at once.
 */
import type { Logger } from 'pino';
import type { ClusterDatabase } from '../cluster/cluster-database.js';
import type { Clock } from '../domain/ports.js';
import type { DriverEvent } from '../driver/model-driver.js';
import { ProviderGate } from '../driver/provider-gate.js';
import { NO_LIMITS, type ModelLimits } from '../driver/provider-limits.js';
import { ProviderSharing } from '../driver/provider-sharing.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { SessionStore } from '../sessions/session-store.js';
import { PROCESS_ID } from './quota-parts.js';

export interface ProviderPartsDeps {
  clock: Clock;
  logger: Logger;
  log: SessionLog;
  store: Pick<SessionStore, 'providerLimits'>;
  /** AGENTFOREST_MODEL_LIMITS (default none). */
  limits: ModelLimits | undefined;
  /** Several instances: this one's id (read once they run). */
  instanceId: () => string | undefined;
  /** Several instances: the database whose notifications bring the others' back-offs. */
  database: Pick<ClusterDatabase, 'listen'> | undefined;
  observe: (event: DriverEvent) => void;
}

export function providerParts(deps: ProviderPartsDeps): { providers: ProviderGate; providerSharing: ProviderSharing } {
  const providers = new ProviderGate({
    now: () => deps.clock.now(),
    limits: deps.limits ?? NO_LIMITS,
    noted: (provider, _backoff, waitMs) => {
      deps.observe({ kind: 'backoff', provider, seconds: waitMs / 1000 });
      providerSharing.announce();
    },
  });
  const database = deps.database;
  const providerSharing = new ProviderSharing(providers, {
    log: deps.log,
    reads: deps.store.providerLimits,
    logger: deps.logger,
    instanceId: () => deps.instanceId() ?? PROCESS_ID,
    shared: database !== undefined,
    listen: database === undefined ? undefined : (options) => database.listen(options),
  });
  return { providers, providerSharing };
}
