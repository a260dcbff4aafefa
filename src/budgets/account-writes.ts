/**
 * An operator's change to an agent's account — its budget, its grants — written as one entry
 * into the agent's session, so it is durable and read back with the rest of the log. A live
 * agent's is appended in one synchronous span with the check that makes it (`entry` throws to
 * refuse); a session that is not resident is written through stored-sessions.ts, with the
 * forest's lease taken first and its accounts held, so the accounts the check reads are the
 * forest's last. One that becomes live meanwhile (a cold resume) gets it on its live incarnation.
 */
import { ServiceError } from '../domain/errors.js';
import type { EntryBody, SessionHeader } from '../domain/session.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { StoredSessions } from '../sessions/stored-sessions.js';
import type { ForestPlacement } from '../topology/topology.js';
import type { Budgets } from './budgets.js';

export interface AccountWritesDeps {
  registry: AgentRegistry;
  log: SessionLog;
  stored: StoredSessions;
  forests: Pick<ForestPlacement, 'leased'>;
  budgets: Pick<Budgets, 'withForest'>;
}

export interface AccountWrite<T> {
  /** What is changed, for the refusals' words: `budget`, `grants`. */
  what: string;
  /** The entry to write, or a refusal (a ServiceError): called in the span that writes it. */
  entry: () => EntryBody;
  /** After the entry was queued, in the same span. */
  applied?: () => void;
  /** The answer, once the entry is durable. */
  view: (header: SessionHeader) => T;
}

export class AccountWrites {
  constructor(private readonly deps: AccountWritesDeps) {}

  async write<T>(id: string, change: AccountWrite<T>): Promise<T> {
    const { log, registry } = this.deps;
    const live = registry.get(id);
    if (live?.disposing === true) throw new ServiceError('ACTIVATION_CLOSING', `agent "${id}" is being disposed; its ${change.what} did not change`);
    if (live !== undefined) {
      log.append(id, change.entry());
      change.applied?.();
      await log.durable(live.rootId);
      return change.view(live.header);
    }
    const header = (await log.summary(id))?.header;
    if (header === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    const root = header.rootSession ?? id;
    try {
      return await this.deps.forests.leased(root, () =>
        this.deps.budgets.withForest(root, async () => {
          await this.deps.stored.append(header, `change its ${change.what}`, async () => change.entry());
          change.applied?.();
          return change.view(header);
        }),
      );
    } catch (error) {
      if (error instanceof ServiceError && error.code === 'UNAUTHORIZED' && registry.get(id) !== undefined) return this.write(id, change);
      throw error;
    }
  }
}
