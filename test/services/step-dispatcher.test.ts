/**
 * StepDispatcher with fake agents and a claim function that records every claim: FIFO parking,
 * filters by root and by exact incarnation, long-poll waiters, and the exactly-once guarantee
 * under many waiters and offers; when the oldest parked step was parked (the cluster pool's
 * FIFO across instances) and the news of a step parked with nobody waiting (onParked).
 * Timeouts and park times run on fake timers.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { StepDispatcher } from '../../src/steps/step-dispatcher.js';

interface FakeAgent {
  readonly id: string;
  readonly rootId: string;
}

interface Claim {
  agent: FakeAgent;
}

function agent(id: string, rootId = 'root-1'): FakeAgent {
  return { id, rootId };
}

function setup(onParked?: () => void): { dispatcher: StepDispatcher<FakeAgent, Claim>; claims: FakeAgent[] } {
  const claims: FakeAgent[] = [];
  const dispatcher = new StepDispatcher<FakeAgent, Claim>(
    (a) => {
      claims.push(a);
      return { agent: a };
    },
    undefined,
    undefined,
    onParked,
  );
  return { dispatcher, claims };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('StepDispatcher', () => {
  it('parks an offered agent when nobody waits', () => {
    const { dispatcher, claims } = setup();

    dispatcher.offer(agent('a'));

    expect(dispatcher.readyCount).toBe(1);
    expect(claims).toEqual([]);
  });

  it('tryClaim takes parked agents in the order they were offered', () => {
    const { dispatcher, claims } = setup();
    const [a, b, c] = [agent('a'), agent('b'), agent('c')];
    dispatcher.offer(a);
    dispatcher.offer(b);
    dispatcher.offer(c);

    expect(dispatcher.tryClaim({})?.agent).toBe(a);
    expect(dispatcher.tryClaim({})?.agent).toBe(b);
    expect(dispatcher.tryClaim({})?.agent).toBe(c);
    expect(dispatcher.tryClaim({})).toBeNull();
    expect(claims).toEqual([a, b, c]);
  });

  it('re-offering a parked agent keeps its original place', () => {
    const { dispatcher } = setup();
    const [a, b] = [agent('a'), agent('b')];
    dispatcher.offer(a);
    dispatcher.offer(b);
    dispatcher.offer(a);

    expect(dispatcher.readyCount).toBe(2);
    expect(dispatcher.tryClaim({})?.agent).toBe(a);
    expect(dispatcher.tryClaim({})?.agent).toBe(b);
  });

  it('tryClaim with a rootId takes the oldest agent of that root only', () => {
    const { dispatcher } = setup();
    const a = agent('a', 'r1');
    const b = agent('b', 'r2');
    const c = agent('c', 'r1');
    [a, b, c].forEach((x) => dispatcher.offer(x));

    expect(dispatcher.tryClaim({ rootId: 'r2' })?.agent).toBe(b);
    expect(dispatcher.tryClaim({ rootId: 'r2' })).toBeNull();
    expect(dispatcher.tryClaim({ rootId: 'r3' })).toBeNull();
    expect(dispatcher.tryClaim({ rootId: 'r1' })?.agent).toBe(a);
    expect(dispatcher.tryClaim({ rootId: 'r1' })?.agent).toBe(c);
  });

  it('an agent filter matches the same object only, not another object with the same id', () => {
    const { dispatcher, claims } = setup();
    const a = agent('a');
    const impostor = agent('a');
    dispatcher.offer(a);

    expect(dispatcher.tryClaim({ agent: impostor })).toBeNull();
    expect(dispatcher.readyCount).toBe(1);
    expect(claims).toEqual([]);
    expect(dispatcher.tryClaim({ agent: a })?.agent).toBe(a);
    expect(dispatcher.readyCount).toBe(0);
  });

  it('an agent filter and a rootId filter must both match', () => {
    const { dispatcher } = setup();
    const a = agent('a', 'r1');
    dispatcher.offer(a);

    expect(dispatcher.tryClaim({ agent: a, rootId: 'r2' })).toBeNull();
    expect(dispatcher.tryClaim({ agent: a, rootId: 'r1' })?.agent).toBe(a);
  });

  it('a waiter for one incarnation is not handed another object with the same id', async () => {
    vi.useFakeTimers();
    const { dispatcher, claims } = setup();
    const a = agent('a');
    const impostor = agent('a');
    const pending = dispatcher.claimOrWait({ agent: a }, 1_000);

    dispatcher.offer(impostor);

    expect(claims).toEqual([]);
    expect(dispatcher.readyCount).toBe(1);
    expect(dispatcher.waiting).toBe(1);
    dispatcher.withdraw(impostor);
    dispatcher.offer(a);
    expect((await pending)?.agent).toBe(a);
  });

  it('claimOrWait takes a parked agent at once without waiting', async () => {
    const { dispatcher } = setup();
    const a = agent('a');
    dispatcher.offer(a);

    const claim = await dispatcher.claimOrWait({}, 1_000);

    expect(claim?.agent).toBe(a);
    expect(dispatcher.waiting).toBe(0);
  });

  it('a waiter is handed an agent offered later, at the moment of the offer', async () => {
    vi.useFakeTimers();
    const { dispatcher, claims } = setup();
    const a = agent('a');
    const pending = dispatcher.claimOrWait({}, 1_000);
    expect(dispatcher.waiting).toBe(1);

    dispatcher.offer(a);

    expect(claims).toEqual([a]);
    expect(dispatcher.readyCount).toBe(0);
    expect(dispatcher.waiting).toBe(0);
    expect((await pending)?.agent).toBe(a);
  });

  it('an offer goes to the oldest waiter whose filter matches', async () => {
    vi.useFakeTimers();
    const { dispatcher } = setup();
    const forR2 = dispatcher.claimOrWait({ rootId: 'r2' }, 1_000);
    const anyOld = dispatcher.claimOrWait({}, 1_000);
    const anyNew = dispatcher.claimOrWait({}, 1_000);
    const a = agent('a', 'r1');
    const b = agent('b', 'r2');
    const c = agent('c', 'r1');

    dispatcher.offer(a);
    dispatcher.offer(b);
    dispatcher.offer(c);

    expect((await forR2)?.agent).toBe(b);
    expect((await anyOld)?.agent).toBe(a);
    expect((await anyNew)?.agent).toBe(c);
  });

  it('hands every offered agent to exactly one of many concurrent callers', async () => {
    vi.useFakeTimers();
    const { dispatcher, claims } = setup();
    const agents = Array.from({ length: 12 }, (_, i) => agent(`a${i}`, i % 3 === 0 ? 'r0' : 'r1'));
    const waiters = [
      dispatcher.claimOrWait({}, 1_000),
      dispatcher.claimOrWait({ rootId: 'r0' }, 1_000),
      dispatcher.claimOrWait({}, 1_000),
      dispatcher.claimOrWait({ rootId: 'r1' }, 1_000),
      dispatcher.claimOrWait({ rootId: 'r0' }, 1_000),
      dispatcher.claimOrWait({}, 1_000),
    ];

    const tryClaims: Claim[] = [];
    agents.forEach((a, i) => {
      dispatcher.offer(a);
      // A parked agent offered again (its step still unclaimed) must not become a second step.
      if (!claims.includes(a)) dispatcher.offer(a);
      if (i % 4 === 3) {
        const claim = dispatcher.tryClaim({});
        if (claim !== null) tryClaims.push(claim);
      }
    });
    const fromWaiters = await Promise.all(waiters);
    const rest: Claim[] = [];
    for (let claim = dispatcher.tryClaim({}); claim !== null; claim = dispatcher.tryClaim({})) rest.push(claim);

    const handedOut = [...fromWaiters, ...tryClaims, ...rest].map((c) => c?.agent);
    expect(fromWaiters.every((c) => c !== null)).toBe(true);
    expect(handedOut).toHaveLength(agents.length);
    expect(new Set(handedOut).size).toBe(agents.length);
    expect(new Set(handedOut)).toEqual(new Set(agents));
    expect(claims).toHaveLength(agents.length);
    expect(dispatcher.readyCount).toBe(0);
    expect(dispatcher.waiting).toBe(0);
  });

  it('a waiter whose signal aborts resolves null and is never handed a step afterwards', async () => {
    vi.useFakeTimers();
    const { dispatcher, claims } = setup();
    const controller = new AbortController();
    const pending = dispatcher.claimOrWait({}, 10_000, controller.signal);

    controller.abort();

    expect(await pending).toBeNull();
    expect(dispatcher.waiting).toBe(0);
    const a = agent('a');
    dispatcher.offer(a);
    expect(claims).toEqual([]);
    expect(dispatcher.readyCount).toBe(1);
    expect(dispatcher.tryClaim({})?.agent).toBe(a);
  });

  it('a caller whose signal is already aborted claims nothing and leaves the agent parked', async () => {
    const { dispatcher, claims } = setup();
    const a = agent('a');
    dispatcher.offer(a);

    const claim = await dispatcher.claimOrWait({}, 1_000, AbortSignal.abort());

    expect(claim).toBeNull();
    expect(claims).toEqual([]);
    expect(dispatcher.readyCount).toBe(1);
  });

  it('a waiter resolves null when its wait times out, and later offers are parked', async () => {
    vi.useFakeTimers();
    const { dispatcher, claims } = setup();
    let settled = false;
    const pending = dispatcher.claimOrWait({}, 5_000).then((claim) => {
      settled = true;
      return claim;
    });

    await vi.advanceTimersByTimeAsync(4_999);
    expect(settled).toBe(false);
    expect(dispatcher.waiting).toBe(1);

    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toBe(true);
    expect(await pending).toBeNull();
    expect(dispatcher.waiting).toBe(0);

    dispatcher.offer(agent('a'));
    expect(claims).toEqual([]);
    expect(dispatcher.readyCount).toBe(1);
  });

  it('claimOrWait with no wait resolves null at once when nothing is parked', async () => {
    const { dispatcher } = setup();

    expect(await dispatcher.claimOrWait({}, 0)).toBeNull();
    expect(dispatcher.waiting).toBe(0);
  });

  it('release() answers every waiter with null', async () => {
    vi.useFakeTimers();
    const { dispatcher, claims } = setup();
    const a = agent('a');
    const pending = [
      dispatcher.claimOrWait({}, 1_000),
      dispatcher.claimOrWait({ rootId: 'r9' }, 1_000),
      dispatcher.claimOrWait({ agent: a }, 1_000),
    ];

    dispatcher.release();

    expect(await Promise.all(pending)).toEqual([null, null, null]);
    expect(dispatcher.waiting).toBe(0);
    dispatcher.offer(a);
    expect(claims).toEqual([]);
  });

  it('release(agent) answers only the waiters for that incarnation', async () => {
    vi.useFakeTimers();
    const { dispatcher } = setup();
    const a = agent('a');
    const forA = dispatcher.claimOrWait({ agent: a }, 1_000);
    const forImpostor = dispatcher.claimOrWait({ agent: agent('a') }, 1_000);
    const forAny = dispatcher.claimOrWait({}, 1_000);

    dispatcher.release(a);

    expect(await forA).toBeNull();
    expect(dispatcher.waiting).toBe(2);
    dispatcher.release();
    expect(await forImpostor).toBeNull();
    expect(await forAny).toBeNull();
  });

  it('withdraw removes a parked agent', () => {
    const { dispatcher } = setup();
    const a = agent('a');
    const b = agent('b');
    dispatcher.offer(a);
    dispatcher.offer(b);

    dispatcher.withdraw(a);

    expect(dispatcher.readyCount).toBe(1);
    expect(dispatcher.tryClaim({ agent: a })).toBeNull();
    expect(dispatcher.tryClaim({})?.agent).toBe(b);
  });

  it('withdraw of another object with the same id leaves the parked agent in place', () => {
    const { dispatcher } = setup();
    const a = agent('a');
    dispatcher.offer(a);

    dispatcher.withdraw(agent('a'));

    expect(dispatcher.readyCount).toBe(1);
    expect(dispatcher.tryClaim({})?.agent).toBe(a);
  });
});

describe('StepDispatcher with a driver lane', () => {
  function withLane(): StepDispatcher<FakeAgent, Claim> {
    return new StepDispatcher<FakeAgent, Claim>((a) => ({ agent: a }), { runs: (a) => a.rootId === 'driven', admits: () => true });
  }

  it('parks the steps of driven agents in the driver lane alone, never for a pool waiter or the pool', async () => {
    const dispatcher = withLane();
    const poolWaiter = dispatcher.claimOrWait({}, 10_000);
    const driven = agent('d', 'driven');

    dispatcher.offer(driven);

    expect(dispatcher.readyCount).toBe(0);
    expect(dispatcher.drivenWaiting).toBe(1);
    expect(dispatcher.tryClaim({})).toBeNull();
    expect(dispatcher.tryClaim({ rootId: 'driven' })).toBeNull();
    expect(dispatcher.tryClaim({ driven: true })?.agent).toBe(driven);
    expect(dispatcher.drivenWaiting).toBe(0);
    dispatcher.release();
    expect(await poolWaiter).toBeNull();
  });

  it('hands a driven step straight to a waiting driver worker, and never a pool step', async () => {
    const dispatcher = withLane();
    const worker = dispatcher.claimOrWait({ driven: true }, Infinity);
    const pooled = agent('p');

    dispatcher.offer(pooled);
    expect(dispatcher.tryClaim({})?.agent).toBe(pooled);
    const driven = agent('d', 'driven');
    dispatcher.offer(driven);

    expect((await worker)?.agent).toBe(driven);
    expect(dispatcher.drivenWaiting).toBe(0);
  });

  it('lets a driver worker wait with no timer, uncounted among the long-polls, until a step or the drain', async () => {
    vi.useFakeTimers();
    const dispatcher = withLane();
    const worker = dispatcher.claimOrWait({ driven: true }, Infinity);

    expect(vi.getTimerCount()).toBe(0);
    expect(dispatcher.waiting).toBe(0);
    dispatcher.release(agent('d', 'driven'));
    dispatcher.release();

    expect(await worker).toBeNull();
  });
});

describe('StepDispatcher: when the oldest step was parked, and news of a park', () => {
  it('oldestParkedAt is undefined while nothing is parked', async () => {
    vi.useFakeTimers();
    const { dispatcher } = setup();
    expect(dispatcher.oldestParkedAt()).toBeUndefined();

    const pending = dispatcher.claimOrWait({}, 1_000);
    dispatcher.offer(agent('a'));

    expect((await pending)?.agent.id).toBe('a');
    expect(dispatcher.oldestParkedAt()).toBeUndefined();
  });

  it('is the park time of the first parked agent, which a re-offer does not move', () => {
    vi.useFakeTimers();
    const { dispatcher } = setup();
    const [a, b] = [agent('a'), agent('b')];
    vi.setSystemTime(1_000);
    dispatcher.offer(a);
    vi.setSystemTime(2_000);
    dispatcher.offer(b);

    expect(dispatcher.oldestParkedAt()).toBe(1_000);
    vi.setSystemTime(3_000);
    dispatcher.offer(a);
    expect(dispatcher.oldestParkedAt()).toBe(1_000);
  });

  it('moves to the next parked agent once the first is claimed', () => {
    vi.useFakeTimers();
    const { dispatcher } = setup();
    vi.setSystemTime(1_000);
    dispatcher.offer(agent('a'));
    vi.setSystemTime(2_000);
    dispatcher.offer(agent('b'));

    expect(dispatcher.tryClaim({})?.agent.id).toBe('a');
    expect(dispatcher.oldestParkedAt()).toBe(2_000);
    expect(dispatcher.tryClaim({})?.agent.id).toBe('b');
    expect(dispatcher.oldestParkedAt()).toBeUndefined();
  });

  it('moves to the next parked agent once the first is withdrawn, and not when another incarnation is', () => {
    vi.useFakeTimers();
    const { dispatcher } = setup();
    const a = agent('a');
    vi.setSystemTime(1_000);
    dispatcher.offer(a);
    vi.setSystemTime(2_000);
    dispatcher.offer(agent('b'));

    dispatcher.withdraw(agent('a'));
    expect(dispatcher.oldestParkedAt()).toBe(1_000);
    dispatcher.withdraw(a);
    expect(dispatcher.oldestParkedAt()).toBe(2_000);
  });

  it('a claim of a later agent by root leaves the oldest in place', () => {
    vi.useFakeTimers();
    const { dispatcher } = setup();
    vi.setSystemTime(1_000);
    dispatcher.offer(agent('a', 'r1'));
    vi.setSystemTime(2_000);
    dispatcher.offer(agent('b', 'r2'));
    vi.setSystemTime(3_000);
    dispatcher.offer(agent('c', 'r1'));

    expect(dispatcher.tryClaim({ rootId: 'r2' })?.agent.id).toBe('b');
    expect(dispatcher.oldestParkedAt()).toBe(1_000);
    expect(dispatcher.tryClaim({ rootId: 'r1' })?.agent.id).toBe('a');
    expect(dispatcher.oldestParkedAt()).toBe(3_000);
  });

  it('onParked is called when a step is parked with nobody waiting for it', async () => {
    vi.useFakeTimers();
    const onParked = vi.fn();
    const { dispatcher } = setup(onParked);
    const forOtherRoot = dispatcher.claimOrWait({ rootId: 'r9' }, 1_000);

    dispatcher.offer(agent('a', 'r1'));

    expect(onParked).toHaveBeenCalledTimes(1);
    expect(dispatcher.readyCount).toBe(1);
    dispatcher.release();
    expect(await forOtherRoot).toBeNull();
  });

  it('onParked is not called when the step goes straight to a waiter, nor when a parked agent is offered again', async () => {
    vi.useFakeTimers();
    const onParked = vi.fn();
    const { dispatcher } = setup(onParked);
    const pending = dispatcher.claimOrWait({}, 1_000);
    const a = agent('a');

    dispatcher.offer(a);
    expect((await pending)?.agent).toBe(a);
    expect(onParked).not.toHaveBeenCalled();

    const b = agent('b');
    dispatcher.offer(b);
    dispatcher.offer(b);
    expect(onParked).toHaveBeenCalledTimes(1);
  });

  it('onParked is not called for a step of the driver lane, nor for one the gate stops', () => {
    const onParked = vi.fn();
    const dispatcher = new StepDispatcher<FakeAgent, Claim>(
      (a) => ({ agent: a }),
      { runs: (a) => a.rootId === 'driven', admits: () => true },
      { admits: (a) => a.rootId !== 'stopped' },
      onParked,
    );

    dispatcher.offer(agent('d', 'driven'));
    dispatcher.offer(agent('s', 'stopped'));

    expect(onParked).not.toHaveBeenCalled();
    expect(dispatcher.oldestParkedAt()).toBeUndefined();
  });
});
