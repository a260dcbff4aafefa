/**
 * The AgentSetupCommit publication boundary through the real composition: a continuable
 * child's setup contributions run and commit before its session is created (or re-opened) and
 * before it enters the live registry; a revocation that lands before the commit rolls the child back so that nothing is
 * published, and the same operation succeeds once that contribution is gone.
 *
 * How the order is observed: the child id is minted before setup, so an IdSource wrapper
 * records it and the contribution can probe the registry and the session log for exactly that
 * id. `SessionLog.isOpen(id)` turns true synchronously when the session is created
 * (`log.create`) or re-opened (`log.open`), long before the group commit reaches the store,
 * so it is the sound synchronous "session exists" probe; a store read only shows a header
 * after the next commit and could not tell an early `log.create` apart. The commit itself is
 * internal, so the tests wrap `setup.apply` (and `log.create`/`log.open`, `registry.add`) on
 * this harness's own instances to record when each runs; the wrappers call straight through.
 */
import { Type } from '@sinclair/typebox';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ServiceError } from '../../src/domain/errors.js';
import type { IdSource } from '../../src/domain/ports.js';
import type { SessionEntry } from '../../src/domain/session.js';
import { REVOKED_MESSAGE } from '../../src/children/setup-registry.js';
import type { AgentScope, LiveAgent } from '../../src/agents/live-agent.js';
import { defineTool, toolInput } from '../../src/tools/define-tool.js';
import { timeOrderedIds } from '../../src/sessions/ids.js';
import { claim, createRoot, postOutput, startHarness, until, type Harness } from '../fixtures/harness.js';

const REVOKED_TEXT =
  'a continuable-subagent setup contribution was revoked while this child was being built; the child was not established';

const FROM_ROOT = { kind: 'coordinator', senderSessionId: 'root' } as const;
const CHILD = { mode: 'continuable', provider: 'in-process', prompt: 'child task' } as const;

/** A child-scoped tool installed by the test's own contributions. */
const PROBE_TOOL = defineTool({
  name: 'probe',
  description: 'test probe',
  input: toolInput(Type.Object({})),
  inScope: () => true,
  execute: () => ({ output: {}, content: 'probed' }),
});

afterEach(() => {
  vi.restoreAllMocks();
});

interface Fixture {
  h: Harness;
  parent: LiveAgent;
  /** Agent ids minted so far, in order (roots created with an explicit id mint none). */
  agentIds: string[];
}

async function open(): Promise<Fixture> {
  const agentIds: string[] = [];
  const production = timeOrderedIds();
  const ids: IdSource = {
    next(kind) {
      const id = production.next(kind);
      if (kind === 'agent') agentIds.push(id);
      return id;
    },
  };
  const h = await startHarness({ ids });
  await createRoot(h.app, { id: 'root' });
  const parent = h.system.registry.get('root');
  if (parent === undefined) throw new Error('the root is not live');
  return { h, parent, agentIds };
}

function lastMinted(agentIds: readonly string[]): string {
  const id = agentIds[agentIds.length - 1];
  if (id === undefined) throw new Error('no agent id was minted');
  return id;
}

/**
 * Records the publication order: every commit of an applied setup, session creation and
 * re-opening, activation entries and registry entry. Each wrapper calls the original.
 */
function recordPublication(h: Harness, order: string[]): void {
  const { setup, log, registry } = h.system;
  const apply = setup.apply.bind(setup);
  vi.spyOn(setup, 'apply').mockImplementation((scope: AgentScope) => {
    const inner = apply(scope);
    return {
      commit() {
        order.push('setup:commit');
        inner.commit();
      },
    };
  });
  const create = log.create.bind(log);
  vi.spyOn(log, 'create').mockImplementation((header) => {
    order.push('session:created');
    create(header);
  });
  const reopen = log.open.bind(log);
  vi.spyOn(log, 'open').mockImplementation((id, lastSeq, root) => {
    order.push('session:opened');
    reopen(id, lastSeq, root);
  });
  const append = log.append.bind(log);
  vi.spyOn(log, 'append').mockImplementation((id, body) => {
    if (body.type === 'activation') order.push(`activation:${body.event}`);
    return append(id, body);
  });
  const add = registry.add.bind(registry);
  vi.spyOn(registry, 'add').mockImplementation((agent) => {
    order.push('agent:registered');
    add(agent);
  });
}

/** Awaits `promise`, requires it to reject with a ServiceError, and returns that error. */
async function rejectionOf(promise: Promise<unknown>): Promise<ServiceError> {
  let caught: unknown;
  try {
    await promise;
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(ServiceError);
  return caught as ServiceError;
}

function activationEvents(entries: readonly SessionEntry[]): string[] {
  return entries.flatMap((entry) => (entry.type === 'activation' ? [entry.event] : []));
}

function liveIds(h: Harness): string[] {
  return [...h.system.registry.values()].map((agent) => agent.id);
}

/** Runs the child's queued turn to completion over HTTP and waits until it settles. */
async function settleChild(h: Harness, child: LiveAgent): Promise<void> {
  const driver = { id: child.id, token: child.token };
  const step = await claim(h.app, driver);
  expect(step).not.toBeNull();
  const res = await postOutput(h.app, driver, step!.id, { content: 'done' });
  expect(res.statusCode).toBe(200);
  await until(() => h.system.registry.get(child.id) === undefined, 'child settled');
}

describe('AgentSetupCommit: create and resume ordering', () => {
  it('a new child runs setup and commits it before its session is created and before it is registered', async () => {
    const { h, parent, agentIds } = await open();
    const order: string[] = [];
    const scopes: AgentScope[] = [];
    const probes: { registered: boolean; sessionOpen: boolean; live: string[] }[] = [];
    let storedHeader: Promise<unknown> | undefined;
    const probe = (): void => {
      const childId = lastMinted(agentIds);
      probes.push({ registered: h.system.registry.get(childId) !== undefined, sessionOpen: h.system.log.isOpen(childId), live: liveIds(h) });
    };
    h.system.setup.register((scope) => {
      order.push('setup:start');
      scopes.push(scope);
      probe();
      // A snapshot of the store taken during setup (the memory store reads synchronously).
      storedHeader = h.system.store.header(lastMinted(agentIds));
      order.push('setup:end');
      return () => undefined;
    });
    recordPublication(h, order);

    const { agent } = await h.system.continuation.children.startChild(parent, CHILD);

    expect(agent.id).toBe(lastMinted(agentIds));
    expect(order).toEqual(['setup:start', 'setup:end', 'setup:commit', 'session:created', 'activation:created', 'agent:registered']);
    expect(probes).toEqual([{ registered: false, sessionOpen: false, live: ['root'] }]);
    expect(await storedHeader).toBeUndefined();
    // The contribution ran on this child's own scope, after the report package's contribution.
    expect(scopes).toEqual([agent.scope]);
    expect(scopes[0]).toBe(agent.scope);
    expect([...agent.scope.tools.keys()]).toEqual(['report']);

    expect(h.system.registry.get(agent.id)).toBe(agent);
    const header = await h.system.store.header(agent.id);
    expect(header?.header).toMatchObject({ id: agent.id, parentSession: 'root', mode: 'continuable', provider: 'in-process' });
    const entries = await h.system.store.read(agent.id, 0);
    expect(entries[0]).toMatchObject({ seq: 1, type: 'activation', event: 'created' });
  });

  it('a cold resume runs the current contributions on a new scope and commits before the session re-opens and the agent re-registers', async () => {
    const { h, parent, agentIds } = await open();
    const order: string[] = [];
    const scopes: AgentScope[] = [];
    const probes: { registered: boolean; sessionOpen: boolean }[] = [];
    h.system.setup.register((scope) => {
      order.push('setup:start');
      scopes.push(scope);
      // The child's id is the only agent id minted in this test, at creation and kept on resume.
      const childId = lastMinted(agentIds);
      probes.push({ registered: h.system.registry.get(childId) !== undefined, sessionOpen: h.system.log.isOpen(childId) });
      order.push('setup:end');
      return () => undefined;
    });
    const { agent: first } = await h.system.continuation.children.startChild(parent, CHILD);
    await settleChild(h, first);
    expect(h.system.log.isOpen(first.id)).toBe(false);

    recordPublication(h, order);
    order.length = 0;
    probes.length = 0;
    const delivered = await h.system.continuation.children.deliverToChild(parent, first.id, 'followup', 'more', FROM_ROOT, 'http');

    expect(agentIds).toEqual([first.id]);
    expect(order).toEqual(['setup:start', 'setup:end', 'setup:commit', 'session:opened', 'activation:resumed', 'agent:registered']);
    expect(probes).toEqual([{ registered: false, sessionOpen: false }]);
    const second = h.system.registry.get(first.id);
    expect(second).toBeDefined();
    expect(second).not.toBe(first);
    expect(scopes).toHaveLength(2);
    expect(scopes[1]).not.toBe(scopes[0]);
    expect(scopes[1]).toBe(second!.scope);
    expect(delivered.resumed?.agentToken).toBeDefined();
    expect(delivered.resumed?.agentToken).not.toBe(first.token);
    expect(delivered.resumed?.agentToken).toBe(second!.token);
    const entries = await h.system.log.read(first.id, 0);
    expect(activationEvents(entries)).toEqual(['created', 'settled', 'resumed']);
  });
});

describe('AgentSetupCommit: a revoked resume commit', () => {
  /** Starts a child, lets it settle, and returns it (the revoking contribution comes later). */
  async function settledChild(f: Fixture): Promise<LiveAgent> {
    const { agent } = await f.h.system.continuation.children.startChild(f.parent, CHILD);
    await settleChild(f.h, agent);
    return agent;
  }

  /** Checks that the failed resume published nothing and left the child cold. */
  async function expectNothingPublished(h: Harness, childId: string): Promise<void> {
    expect(h.system.registry.get(childId)).toBeUndefined();
    expect(liveIds(h)).toEqual(['root']);
    expect(h.system.log.isOpen(childId)).toBe(false);
    expect(h.system.continuation.activations.size).toBe(0);
    expect(activationEvents(await h.system.log.read(childId, 0))).toEqual(['created', 'settled']);
  }

  it('a contribution that revokes itself while installing on resume makes the followup reject revoked, and a retry then resumes the child', async () => {
    const f = await open();
    const { h, parent } = f;
    const child = await settledChild(f);
    const released: string[] = [];
    const failedScopes: AgentScope[] = [];
    const remove: () => void = h.system.setup.register((scope) => {
      failedScopes.push(scope);
      scope.tools.set('probe', PROBE_TOOL);
      remove();
      return () => {
        scope.tools.delete('probe');
        released.push('probe');
      };
    });

    const error = await rejectionOf(h.system.continuation.children.deliverToChild(parent, child.id, 'followup', 'more', FROM_ROOT, 'http'));

    expect(error.code).toBe('ACTIVATION_SETUP_REVOKED');
    expect(error.message).toBe(REVOKED_TEXT);
    expect(released).toEqual(['probe']);
    // The whole batch was rolled back: the report package's installation too.
    expect(failedScopes).toHaveLength(1);
    expect(failedScopes[0]!.tools.size).toBe(0);
    await expectNothingPublished(h, child.id);

    const retried = await h.system.continuation.children.deliverToChild(parent, child.id, 'followup', 'more', FROM_ROOT, 'http');

    const resumed = h.system.registry.get(child.id);
    expect(resumed).toBeDefined();
    expect(retried.resumed?.agentToken).toBe(resumed!.token);
    expect(retried.resumed?.agentToken).not.toBe(child.token);
    expect([...resumed!.scope.tools.keys()]).toEqual(['report']);
    expect(released).toEqual(['probe']);
    expect(activationEvents(await h.system.log.read(child.id, 0))).toEqual(['created', 'settled', 'resumed']);
  });

  it('a revocation queued on a microtask during resume setup makes the commit reject revoked, and a retry then resumes the child', async () => {
    const f = await open();
    const { h, parent } = f;
    const child = await settledChild(f);
    const released: string[] = [];
    const order: string[] = [];
    const remove = h.system.setup.register(() => {
      order.push('setup');
      queueMicrotask(() => {
        order.push('revoke');
        remove();
      });
      return () => {
        released.push('late');
      };
    });
    recordPublication(h, order);

    const error = await rejectionOf(h.system.continuation.children.deliverToChild(parent, child.id, 'followup', 'more', FROM_ROOT, 'http'));

    expect(error.code).toBe('ACTIVATION_SETUP_REVOKED');
    expect(error.message).toBe(REVOKED_MESSAGE);
    expect(released).toEqual(['late']);
    // The revocation landed between setup and commit; nothing after the commit happened.
    expect(order).toEqual(['setup', 'revoke', 'setup:commit']);
    await expectNothingPublished(h, child.id);

    order.length = 0;
    const retried = await h.system.continuation.children.deliverToChild(parent, child.id, 'followup', 'more', FROM_ROOT, 'http');

    expect(order).toEqual(['setup:commit', 'session:opened', 'activation:resumed', 'agent:registered']);
    expect(retried.resumed?.agentToken).toBe(h.system.registry.get(child.id)?.token);
    expect(released).toEqual(['late']);
    expect(activationEvents(await h.system.log.read(child.id, 0))).toEqual(['created', 'settled', 'resumed']);
  });
});

describe('AgentSetupCommit: a creation whose contribution revokes itself, at service level', () => {
  /** Checks that the failed creation left only the root: no child session and no live child. */
  async function expectOnlyTheRoot(h: Harness, childId: string): Promise<void> {
    expect(liveIds(h)).toEqual(['root']);
    expect(h.system.registry.get(childId)).toBeUndefined();
    expect(h.system.log.isOpen(childId)).toBe(false);
    expect(h.system.continuation.activations.size).toBe(0);
    await h.system.log.durable();
    expect(await h.system.store.children('root')).toEqual([]);
    expect(await h.system.store.header(childId)).toBeUndefined();
  }

  it('a contribution that revokes itself inside its installer makes startChild reject revoked and publishes nothing', async () => {
    const { h, parent, agentIds } = await open();
    const released: string[] = [];
    const scopes: AgentScope[] = [];
    const remove: () => void = h.system.setup.register((scope) => {
      scopes.push(scope);
      remove();
      return () => {
        released.push('self');
      };
    });

    const error = await rejectionOf(h.system.continuation.children.startChild(parent, CHILD));

    expect(error.code).toBe('ACTIVATION_SETUP_REVOKED');
    expect(error.message).toBe(REVOKED_TEXT);
    expect(released).toEqual(['self']);
    expect(scopes).toHaveLength(1);
    expect(scopes[0]!.tools.size).toBe(0);
    await expectOnlyTheRoot(h, lastMinted(agentIds));

    const { agent } = await h.system.continuation.children.startChild(parent, CHILD);
    expect(h.system.registry.get(agent.id)).toBe(agent);
    expect((await h.system.store.children('root')).map((s) => s.header.id)).toEqual([agent.id]);
    expect(released).toEqual(['self']);
  });

  it('a revocation queued on a microtask during setup makes startChild reject revoked, runs the disposer and publishes nothing', async () => {
    const { h, parent, agentIds } = await open();
    const released: string[] = [];
    const scopes: AgentScope[] = [];
    const remove = h.system.setup.register((scope) => {
      scopes.push(scope);
      scope.tools.set('probe', PROBE_TOOL);
      queueMicrotask(remove);
      return () => {
        scope.tools.delete('probe');
        released.push('late');
      };
    });

    const error = await rejectionOf(h.system.continuation.children.startChild(parent, CHILD));

    expect(error.code).toBe('ACTIVATION_SETUP_REVOKED');
    expect(error.message).toBe(REVOKED_TEXT);
    expect(released).toEqual(['late']);
    expect(scopes).toHaveLength(1);
    expect(scopes[0]!.tools.size).toBe(0);
    await expectOnlyTheRoot(h, lastMinted(agentIds));

    const { agent } = await h.system.continuation.children.startChild(parent, CHILD);
    expect(h.system.registry.get(agent.id)).toBe(agent);
    expect([...agent.scope.tools.keys()]).toEqual(['report']);
    expect((await h.system.store.children('root')).map((s) => s.header.id)).toEqual([agent.id]);
    expect(released).toEqual(['late']);
  });

  it('a contribution removed after the child was published is live revocation: its tool vanishes and the child stays', async () => {
    const { h, parent } = await open();
    const released: string[] = [];
    const remove = h.system.setup.register((scope) => {
      scope.tools.set('probe', PROBE_TOOL);
      return () => {
        scope.tools.delete('probe');
        released.push('probe');
      };
    });
    const { agent } = await h.system.continuation.children.startChild(parent, CHILD);
    expect([...agent.scope.tools.keys()]).toEqual(['report', 'probe']);

    remove();

    expect(released).toEqual(['probe']);
    expect([...agent.scope.tools.keys()]).toEqual(['report']);
    expect(h.system.registry.get(agent.id)).toBe(agent);
  });
});
