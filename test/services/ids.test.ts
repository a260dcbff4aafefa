import { describe, expect, it } from 'vitest';
import { timeOrderedIds, uuidV7Source } from '../../src/sessions/ids.js';

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('time-ordered ids', () => {
  it('are RFC 9562 version 7 UUIDs carrying the clock time in their first 48 bits', () => {
    const at = Date.UTC(2026, 10, 30, 8, 0, 0);
    const id = uuidV7Source(() => at)();
    expect(id).toMatch(UUID_V7);
    expect(parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(at);
  });

  it('strictly increase as strings within one millisecond, past the 4,096 the counter holds', () => {
    const next = uuidV7Source(() => 1_700_000_000_000);
    const ids = Array.from({ length: 10_000 }, () => next());
    for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    ids.forEach((id) => expect(id).toMatch(UUID_V7));
  });

  it('strictly increase even when the clock steps back', () => {
    const times = [5_000, 5_000, 4_000, 4_001, 6_000];
    const next = uuidV7Source(() => times.shift()!);
    const ids = Array.from({ length: 5 }, () => next());
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(5);
  });

  it('of every kind share one clock and counter, so their UUIDs strictly increase together', () => {
    const ids = timeOrderedIds(() => 1_700_000_000_000);
    const kinds = ['message', 'agent', 'turn', 'inbox', 'step', 'activation'] as const;
    const made = Array.from({ length: 600 }, (_, i) => ids.next(kinds[i % kinds.length]!));
    const uuids = made.map((id) => id.slice(id.indexOf('_') + 1));
    uuids.forEach((uuid) => expect(uuid).toMatch(UUID_V7));
    for (let i = 1; i < uuids.length; i++) expect(uuids[i]! > uuids[i - 1]!).toBe(true);
    expect(made[0]).toMatch(/^msg_/);
    expect(made[1]).toMatch(/^agt_/);
  });

  it('carry their kind prefix', () => {
    const ids = timeOrderedIds();
    expect(ids.next('message')).toMatch(/^msg_/);
    expect(ids.next('agent')).toMatch(/^agt_/);
    expect(ids.next('activation')).toMatch(/^act_/);
  });
});
