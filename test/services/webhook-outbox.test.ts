/**
 * The webhook outbox in every store: an event committed with a batch becomes one delivery per
 * matching subscription (type and forest), never two for one event; a stream's head is its
 * oldest pending delivery; attempts, retries and unsubscribing change exactly their rows; and a
 * batch the store rejects leaves no delivery behind.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SessionHeader } from '../../src/domain/session.js';
import type { SessionStore, WriteBatch } from '../../src/sessions/session-store.js';
import type { OutboxEvent, WebhookSubscription } from '../../src/sessions/outbox.js';
import { STORE_FACTORIES, type StoreFixture } from '../fixtures/store-factories.js';

const AT = Date.UTC(2026, 0, 1);

function sub(id: string, events: WebhookSubscription['events'], rootId: string | null = null): WebhookSubscription {
  return { id, url: `http://127.0.0.1:9/${id}`, events, rootId, secret: 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ=', createdAt: AT };
}

function event(id: string, type: OutboxEvent['type'], rootId: string, at = AT): OutboxEvent {
  return { id, type, rootId, at, payload: JSON.stringify({ type, timestamp: new Date(at).toISOString(), data: { id } }) };
}

function root(id: string): SessionHeader {
  return { version: 1, id, createdAt: new Date(AT).toISOString(), kind: 'root', parentSession: null, depth: 0, mode: null, provider: null } as SessionHeader;
}

const only = (partial: Partial<WriteBatch>): WriteBatch => ({ headers: [], entries: [], ...partial });

for (const factory of STORE_FACTORIES) describe(`webhook outbox (${factory.name})`, () => {
  let fixture: StoreFixture;
  let store: SessionStore;
  beforeEach(async () => {
    fixture = await factory.create();
    store = fixture.store;
  });
  afterEach(async () => fixture.dispose());

  it('makes one delivery per matching subscription and event, in outbox order, and none for an event seen again', async () => {
    await store.write(only({ headers: [root('r1'), root('r2')], webhooks: [
      { op: 'subscribe', subscription: sub('all', ['turn.ended', 'agent.settled']) },
      { op: 'subscribe', subscription: sub('r1only', ['turn.ended'], 'r1') },
      { op: 'subscribe', subscription: sub('reports', ['report.delivered']) },
    ] }));
    await store.write(only({ outbox: [event('e1', 'turn.ended', 'r1'), event('e2', 'turn.ended', 'r2'), event('e3', 'agent.settled', 'r1')] }));
    await store.write(only({ outbox: [event('e1', 'turn.ended', 'r1')] }));
    const ids = async (webhook: string) => (await store.webhooks.deliveries(webhook, { limit: 10 })).map((d) => d.eventId);
    expect(await ids('all')).toEqual(['e3', 'e2', 'e1']);
    expect(await ids('r1only')).toEqual(['e1']);
    expect(await ids('reports')).toEqual([]);
    const due = await store.webhooks.due(AT, 10);
    // Heads only: 'all' has two streams (r1: e1 before e3; r2: e2), 'r1only' one.
    expect(due.map((d) => `${d.webhookId}:${d.eventId}`).sort()).toEqual(['all:e1', 'all:e2', 'r1only:e1']);
    expect(due.find((d) => d.webhookId === 'all' && d.eventId === 'e1')).toMatchObject({ url: 'http://127.0.0.1:9/all', payload: expect.stringContaining('"e1"') });
    expect(await store.webhooks.backlog()).toEqual({ pending: 4, oldestPendingAt: AT });
  });

  it('records attempts, gives the stream its next head once one is delivered, retries a failed one and drops a subscription with its rows', async () => {
    await store.write(only({ headers: [root('r1')], webhooks: [{ op: 'subscribe', subscription: sub('w', ['turn.ended']) }] }));
    await store.write(only({ outbox: [event('e1', 'turn.ended', 'r1'), event('e2', 'turn.ended', 'r1')] }));
    await store.write(only({ webhooks: [{ op: 'attempted', webhookId: 'w', eventId: 'e1', rootId: 'r1', state: 'pending', attempts: 1, at: AT + 1, nextAt: AT + 1000, status: 500, error: 'the receiver answered 500' }] }));
    expect(await store.webhooks.due(AT + 10, 10)).toEqual([]);
    expect((await store.webhooks.due(AT + 1000, 10)).map((d) => d.eventId)).toEqual(['e1']);
    await store.write(only({ webhooks: [{ op: 'attempted', webhookId: 'w', eventId: 'e1', rootId: 'r1', state: 'failed', attempts: 2, at: AT + 1000, nextAt: AT + 1000, status: 503, error: 'the receiver answered 503' }] }));
    expect((await store.webhooks.due(AT + 1000, 10)).map((d) => d.eventId)).toEqual(['e2']);
    expect(await store.webhooks.delivery('w', 'e1')).toMatchObject({ state: 'failed', attempts: 2, lastStatus: 503, lastError: 'the receiver answered 503' });
    await store.write(only({ webhooks: [{ op: 'retry', webhookId: 'w', eventId: 'e1', rootId: 'r1', at: AT + 5000 }] }));
    expect(await store.webhooks.delivery('w', 'e1')).toMatchObject({ state: 'pending', nextAt: AT + 5000, windowStart: AT + 5000 });
    expect((await store.webhooks.deliveries('w', { state: 'pending', limit: 10 })).map((d) => d.eventId)).toEqual(['e2', 'e1']);
    await store.write(only({ webhooks: [{ op: 'unsubscribe', webhookId: 'w' }] }));
    expect(await store.webhooks.subscription('w')).toBeUndefined();
    expect(await store.webhooks.deliveries('w', { limit: 10 })).toEqual([]);
    expect(await store.webhooks.backlog()).toEqual({ pending: 0, oldestPendingAt: null });
  });

  it('leaves no delivery behind when the batch that carries the event is rejected', async () => {
    await store.write(only({ headers: [root('r1')], webhooks: [{ op: 'subscribe', subscription: sub('w', ['turn.ended']) }] }));
    // A second header for an existing session rejects the whole batch.
    await expect(store.write(only({ headers: [root('r1')], outbox: [event('e1', 'turn.ended', 'r1')] }))).rejects.toThrow();
    expect(await store.webhooks.deliveries('w', { limit: 10 })).toEqual([]);
  });
});
