/**
 * Wiring of the service layer: store -> session log -> tools -> agent service. Shared by the
 * server, the tests and the benchmarks so they all run the same composition.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Clock, IdSource, IdKind } from '../domain/ports.js';
import { AgentService } from './agent-service.js';
import { SessionLog } from './session-log.js';
import type { SessionStore } from './session-store.js';
import { MemorySessionStore } from './stores/memory-store.js';
import { SqliteSessionStore, type SqliteSyncMode } from './stores/sqlite-store.js';
import { ToolRegistry } from './tool-registry.js';

export interface System {
  store: SessionStore;
  log: SessionLog;
  tools: ToolRegistry;
  agents: AgentService;
}

const ID_PREFIX: Record<IdKind, string> = {
  agent: 'agt',
  message: 'msg',
  inbox: 'inb',
  turn: 'turn',
  step: 'step',
  activation: 'act',
};

/** Production ids: a kind prefix and a random UUID. */
export const randomIds: IdSource = { next: (kind) => `${ID_PREFIX[kind]}_${randomUUID()}` };

export const systemClock: Clock = { now: () => Date.now() };

export function openStore(dataPath: string, synchronous: SqliteSyncMode = 'full'): SessionStore {
  return dataPath === ':memory:' ? new MemorySessionStore() : new SqliteSessionStore({ path: dataPath, synchronous });
}

export function createSystem(options: { store: SessionStore; logger: Logger; clock?: Clock; ids?: IdSource }): System {
  const log = new SessionLog(options.store, options.logger);
  const tools = new ToolRegistry();
  const agents = new AgentService({
    log,
    tools,
    clock: options.clock ?? systemClock,
    ids: options.ids ?? randomIds,
    logger: options.logger,
  });
  return { store: options.store, log, tools, agents };
}
