/**
 * ClusterPool in-process, with a fake local claim, fake peers behind a fake peer client and a
 * real WorkBoard (fake notify): the step parked longest on any instance is claimed first
 * (forwarded to its peer with no wait, `since` passed on, the peer's body returned as it came,
 * or claimed here); a lost race (204, a refusal, a peer gone) falls through to the next
 * candidate; a peer that cannot say what it holds is skipped and logged; with nothing anywhere
 * the claim waits here and, woken by another instance's notice (never by its own), looks
 * again; it ends at its deadline or when its caller leaves; the caller's key and request id go
 * with every peer call. Every wait is driven by deferred promises or fake timers, never sleeps.
 */
import type { Logger } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ClusterPool } from '../../src/cluster/cluster-pool.js';
import type { Peer, PeerAnswer, PeerCall, PeerClient } from '../../src/cluster/peers.js';
import type { Caller, LocalClaim, PoolClaim } from '../../src/topology/topology.js';
import { WorkBoard } from '../../src/cluster/work-board.js';
import type { RenderedStep } from '../../src/steps/rendered-step.js';

const ME = 'instance-me';
const CALLER: Caller = { authorization: 'Bearer operator-key', requestId: 'req-7' };

type Answer = (call: PeerCall) => Promise<PeerAnswer>;

interface FakePeer {
  /** GET /v1/cluster/pool */
  peek: Answer;
  /** POST /v1/steps/next */
  next: Answer;
}

interface HereCall {
  waitMs: number;
  signal: AbortSignal | undefined;
  since: string | undefined;
}

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (value: T) => void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

function poolState(oldestParkedAt: number | null): Answer {
  return () => Promise.resolve({ status: 200, body: Buffer.from(JSON.stringify({ oldestParkedAt })) });
}

function status(code: number): Answer {
  return () => Promise.resolve({ status: code, body: Buffer.alloc(0) });
}

function fails(message: string): Answer {
  return () => Promise.reject(new Error(message));
}

function stepBody(agentId: string): Buffer {
  return Buffer.from(JSON.stringify({ agentId, agentToken: `token-${agentId}`, step: { id: `step-of-${agentId}` } }));
}

function answersWith(body: Buffer): Answer {
  return () => Promise.resolve({ status: 200, body });
}

function localClaim(agentId: string): LocalClaim {
  return { agentId, agentToken: `token-${agentId}`, step: { id: `step-of-${agentId}` } as unknown as RenderedStep };
}

function setup(options: { logger?: boolean; peersFail?: boolean } = {}) {
  const peers = new Map<string, FakePeer>();
  const calls: { peer: Peer; call: PeerCall }[] = [];
  const hereCalls: HereCall[] = [];
  const here = { oldest: undefined as number | undefined, steps: [] as LocalClaim[] };
  const warn = vi.fn();
  let waitStarted = deferred<HereCall>();
  let handWaiter: ((claim: LocalClaim) => void) | undefined;

  const client = {
    call: (p: Peer, call: PeerCall): Promise<PeerAnswer> => {
      calls.push({ peer: p, call });
      const fake = peers.get(p.instanceId);
      if (fake === undefined) return Promise.reject(new Error(`no such peer ${p.instanceId}`));
      if (call.method === 'GET' && call.path === '/v1/cluster/pool') return fake.peek(call);
      if (call.method === 'POST' && call.path === '/v1/steps/next') return fake.next(call);
      return Promise.reject(new Error(`unexpected call ${call.method} ${call.path}`));
    },
  } as unknown as PeerClient;

  /** Like the dispatcher's claimAny: a parked step at once, else wait until handed one, aborted or timed out. */
  const claimHere = (waitMs: number, signal: AbortSignal | undefined, since: string | undefined): Promise<LocalClaim | null> => {
    const call = { waitMs, signal, since };
    hereCalls.push(call);
    if (signal?.aborted === true) return Promise.resolve(null);
    const parked = here.steps.shift();
    if (parked !== undefined) {
      here.oldest = undefined;
      return Promise.resolve(parked);
    }
    if (waitMs <= 0) return Promise.resolve(null);
    return new Promise((resolve) => {
      const finish = (claim: LocalClaim | null): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        handWaiter = undefined;
        resolve(claim);
      };
      const onAbort = (): void => finish(null);
      const timer = setTimeout(() => finish(null), waitMs);
      signal?.addEventListener('abort', onAbort, { once: true });
      handWaiter = finish;
      const started = waitStarted;
      waitStarted = deferred<HereCall>();
      started.resolve(call);
    });
  };

  const board = new WorkBoard({ instanceId: ME, hasParked: () => here.oldest !== undefined, notify: () => Promise.resolve() });
  const cluster = new ClusterPool({
    peers: () =>
      options.peersFail === true
        ? Promise.reject(new Error('connection terminated'))
        : Promise.resolve([...peers.keys()].map((instanceId) => ({ instanceId, url: `http://${instanceId}.invalid:1` }))),
    client,
    board,
    logger: options.logger === false ? undefined : ({ warn } as unknown as Logger),
  });
  /** The step pool's query, as the cluster makes it. */
  const pool = {
    claim: (waitMs: number, signal: AbortSignal | undefined, since: string | undefined, caller: Caller): Promise<PoolClaim | null> =>
      cluster.claim(
        {
          claimHere: (wait, stop) => claimHere(wait, stop, since),
          oldestHere: () => here.oldest,
          state: { method: 'GET', path: '/v1/cluster/pool' },
          claim: { path: '/v1/steps/next', body: since === undefined ? { waitMs: 0 } : { waitMs: 0, since } },
        },
        waitMs,
        signal,
        caller,
      ),
  };

  return {
    pool,
    board,
    peers,
    calls,
    hereCalls,
    here,
    warn,
    /** Resolves when the claim starts waiting here (claimHere with a wait). */
    nextWait: (): Promise<HereCall> => waitStarted.promise,
    /** A step parked here is handed to the claim waiting here. */
    handWaiter: (claim: LocalClaim): void => {
      if (handWaiter === undefined) throw new Error('nobody waits here');
      handWaiter(claim);
    },
    posts: () => calls.filter((c) => c.call.method === 'POST').map((c) => c.peer.instanceId),
    peeks: () => calls.filter((c) => c.call.method === 'GET').length,
  };
}

/** The claim's outcome once it settles, readable without awaiting it. */
function track(claim: Promise<PoolClaim | null>): { settled: () => boolean; result: Promise<PoolClaim | null> } {
  let settled = false;
  const result = claim.finally(() => {
    settled = true;
  });
  return { settled: () => settled, result };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('ClusterPool: the step parked longest anywhere goes first', () => {
  it('forwards the claim, without a wait, to a peer whose oldest step is older than this instance’s, and returns its body as it came', async () => {
    const f = setup();
    const body = stepBody('on-b');
    f.peers.set('b', { peek: poolState(100), next: answersWith(body) });
    f.here.oldest = 200;
    f.here.steps.push(localClaim('here'));

    const claim = await f.pool.claim(0, undefined, undefined, CALLER);

    expect(claim).toEqual({ forwarded: body });
    expect((claim as { forwarded: Buffer }).forwarded).toBe(body);
    const post = f.calls.find((c) => c.call.method === 'POST');
    expect(post?.peer.instanceId).toBe('b');
    expect(post?.call.body).toEqual({ waitMs: 0 });
    expect(f.hereCalls).toEqual([]);
  });

  it('passes `since` on to the peer the claim is forwarded to', async () => {
    const f = setup();
    f.peers.set('b', { peek: poolState(100), next: answersWith(stepBody('on-b')) });

    await f.pool.claim(5_000, undefined, 'step-earlier', CALLER);

    expect(f.calls.find((c) => c.call.method === 'POST')?.call.body).toEqual({ waitMs: 0, since: 'step-earlier' });
  });

  it('picks the oldest among several peers and this instance, and asks only that one', async () => {
    const f = setup();
    const fromC = stepBody('on-c');
    f.peers.set('b', { peek: poolState(300), next: answersWith(stepBody('on-b')) });
    f.peers.set('c', { peek: poolState(100), next: answersWith(fromC) });
    f.peers.set('d', { peek: poolState(null), next: answersWith(stepBody('on-d')) });
    f.here.oldest = 200;
    f.here.steps.push(localClaim('here'));

    const claim = await f.pool.claim(0, undefined, undefined, CALLER);

    expect(claim).toEqual({ forwarded: fromC });
    expect(f.posts()).toEqual(['c']);
    expect(f.hereCalls).toEqual([]);
  });

  it('claims here, without a wait and with the caller’s signal and `since`, when this instance’s step is the oldest', async () => {
    const f = setup();
    const signal = new AbortController().signal;
    const mine = localClaim('here');
    f.peers.set('b', { peek: poolState(100), next: answersWith(stepBody('on-b')) });
    f.here.oldest = 50;
    f.here.steps.push(mine);

    const claim = await f.pool.claim(5_000, signal, 'step-earlier', CALLER);

    expect(claim).toEqual({ local: mine });
    expect(f.hereCalls).toEqual([{ waitMs: 0, signal, since: 'step-earlier' }]);
    expect(f.posts()).toEqual([]);
  });
});

describe('ClusterPool: a lost race falls through to the next candidate', () => {
  it('a peer answering 204 (another claim took its step) falls through to this instance’s step', async () => {
    const f = setup();
    const mine = localClaim('here');
    f.peers.set('b', { peek: poolState(100), next: status(204) });
    f.here.oldest = 200;
    f.here.steps.push(mine);

    const claim = await f.pool.claim(0, undefined, undefined, CALLER);

    expect(claim).toEqual({ local: mine });
    expect(f.posts()).toEqual(['b']);
    expect(f.hereCalls.map((c) => c.waitMs)).toEqual([0]);
    expect(f.warn).not.toHaveBeenCalled();
  });

  it('a peer answering 204 falls through to the next peer, in the order of their oldest steps', async () => {
    const f = setup();
    const fromC = stepBody('on-c');
    f.peers.set('c', { peek: poolState(200), next: answersWith(fromC) });
    f.peers.set('b', { peek: poolState(100), next: status(204) });

    const claim = await f.pool.claim(0, undefined, undefined, CALLER);

    expect(claim).toEqual({ forwarded: fromC });
    expect(f.posts()).toEqual(['b', 'c']);
  });

  it('this instance’s oldest step taken by another claim meanwhile falls through to a peer', async () => {
    const f = setup();
    const fromB = stepBody('on-b');
    f.peers.set('b', { peek: poolState(200), next: answersWith(fromB) });
    f.here.oldest = 100; // but no step left to claim by the time the claim asks

    const claim = await f.pool.claim(0, undefined, undefined, CALLER);

    expect(claim).toEqual({ forwarded: fromB });
    expect(f.hereCalls.map((c) => c.waitMs)).toEqual([0]);
    expect(f.posts()).toEqual(['b']);
  });

  it('a peer refusing (500) or failing the forwarded claim falls through, and is logged', async () => {
    const f = setup();
    const mine = localClaim('here');
    f.peers.set('b', { peek: poolState(100), next: status(500) });
    f.peers.set('c', { peek: poolState(150), next: fails('socket hang up') });
    f.here.oldest = 200;
    f.here.steps.push(mine);

    const claim = await f.pool.claim(0, undefined, undefined, CALLER);

    expect(claim).toEqual({ local: mine });
    expect(f.posts()).toEqual(['b', 'c']);
    expect(f.warn).toHaveBeenCalledTimes(2);
    expect(f.warn.mock.calls.map((c) => (c[0] as { peer: Peer }).peer.instanceId)).toEqual(['b', 'c']);
  });
});

describe('ClusterPool: peers that cannot say what they hold', () => {
  it('skips a peer whose peek throws, answers 500 or answers what is not JSON, logs each, and still claims', async () => {
    const f = setup();
    const fromOk = stepBody('on-ok');
    f.peers.set('down', { peek: fails('connect ECONNREFUSED'), next: answersWith(stepBody('on-down')) });
    f.peers.set('refusing', { peek: status(500), next: answersWith(stepBody('on-refusing')) });
    f.peers.set('garbled', { peek: () => Promise.resolve({ status: 200, body: Buffer.from('<html>') }), next: answersWith(stepBody('on-garbled')) });
    f.peers.set('ok', { peek: poolState(500), next: answersWith(fromOk) });

    const claim = await f.pool.claim(0, undefined, undefined, CALLER);

    expect(claim).toEqual({ forwarded: fromOk });
    expect(f.posts()).toEqual(['ok']);
    expect(f.warn).toHaveBeenCalledTimes(3);
    expect(f.warn.mock.calls.map((c) => (c[0] as { peer: Peer }).peer.instanceId).sort()).toEqual(['down', 'garbled', 'refusing']);
  });

  it('skips a failing peer without a logger too', async () => {
    const f = setup({ logger: false });
    const mine = localClaim('here');
    f.peers.set('down', { peek: fails('connect ECONNREFUSED'), next: answersWith(stepBody('on-down')) });
    f.here.oldest = 300;
    f.here.steps.push(mine);

    expect(await f.pool.claim(0, undefined, undefined, CALLER)).toEqual({ local: mine });
    expect(f.posts()).toEqual([]);
  });
});

describe('ClusterPool: with nothing parked anywhere', () => {
  it('waits here, is not woken by its own notice, and on another instance’s looks again and gets the step forwarded', async () => {
    vi.useFakeTimers();
    vi.setSystemTime(1_000_000);
    const f = setup();
    const fromB = stepBody('on-b');
    const b: FakePeer = { peek: poolState(null), next: answersWith(fromB) };
    f.peers.set('b', b);

    const claim = track(f.pool.claim(10_000, undefined, 'step-earlier', CALLER));
    const wait = await f.nextWait();

    expect(wait.waitMs).toBe(10_000);
    expect(wait.since).toBe('step-earlier');
    expect(wait.signal).toBeDefined();
    expect(wait.signal!.aborted).toBe(false);
    expect(f.peeks()).toBe(1);

    f.board.heard(ME);
    expect(wait.signal!.aborted).toBe(false);

    b.peek = poolState(1_000_500);
    f.board.heard('instance-other');
    expect(wait.signal!.aborted).toBe(true);

    expect(await claim.result).toEqual({ forwarded: fromB });
    expect(f.peeks()).toBe(2);
    expect(f.posts()).toEqual(['b']);
  });

  it('news that arrives while the peers are being asked makes it look again instead of waiting', async () => {
    const f = setup();
    const fromB = stepBody('on-b');
    const firstPeek = deferred<PeerAnswer>();
    const asked = deferred<void>();
    const b: FakePeer = {
      peek: () => {
        asked.resolve();
        return firstPeek.promise;
      },
      next: answersWith(fromB),
    };
    f.peers.set('b', b);

    const claim = f.pool.claim(10_000, undefined, undefined, CALLER);
    await asked.promise;
    f.board.heard('instance-other');
    b.peek = poolState(42);
    firstPeek.resolve({ status: 200, body: Buffer.from(JSON.stringify({ oldestParkedAt: null })) });

    expect(await claim).toEqual({ forwarded: fromB });
    expect(f.peeks()).toBe(2);
    expect(f.hereCalls.filter((c) => c.waitMs > 0)).toEqual([]);
  });

  it('a step parked here while it waits is claimed here', async () => {
    const f = setup();
    f.peers.set('b', { peek: poolState(null), next: status(204) });
    const mine = localClaim('here');

    const claim = f.pool.claim(10_000, undefined, undefined, CALLER);
    await f.nextWait();
    f.handWaiter(mine);

    expect(await claim).toEqual({ local: mine });
    expect(f.peeks()).toBe(1);
    expect(f.posts()).toEqual([]);
  });

  it('looks again as often as other instances announce, each time waiting only what remains', async () => {
    vi.useFakeTimers();
    vi.setSystemTime(1_000_000);
    const f = setup();
    f.peers.set('b', { peek: poolState(null), next: status(204) });

    const claim = track(f.pool.claim(1_000, undefined, undefined, CALLER));
    const first = await f.nextWait();
    expect(first.waitMs).toBe(1_000);

    await vi.advanceTimersByTimeAsync(600);
    const second = f.nextWait();
    f.board.heard('instance-other');
    expect(first.signal!.aborted).toBe(true);
    expect((await second).waitMs).toBe(400);
    expect(f.peeks()).toBe(2);

    await vi.advanceTimersByTimeAsync(399);
    expect(claim.settled()).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await claim.result).toBeNull();
    expect(f.peeks()).toBe(2);
  });
});

describe('ClusterPool: deadline and a caller that leaves', () => {
  it('returns null at the deadline', async () => {
    vi.useFakeTimers();
    vi.setSystemTime(1_000_000);
    const f = setup();
    f.peers.set('b', { peek: poolState(null), next: status(204) });

    const claim = track(f.pool.claim(1_000, undefined, undefined, CALLER));
    await f.nextWait();

    await vi.advanceTimersByTimeAsync(999);
    expect(claim.settled()).toBe(false);
    await vi.advanceTimersByTimeAsync(1);

    expect(await claim.result).toBeNull();
    expect(f.peeks()).toBe(1);
    expect(f.posts()).toEqual([]);
  });

  it('returns null at once without a wait when nothing is parked anywhere', async () => {
    const f = setup();
    f.peers.set('b', { peek: poolState(null), next: status(204) });

    expect(await f.pool.claim(0, undefined, undefined, CALLER)).toBeNull();
    expect(f.hereCalls).toEqual([]);
    expect(f.posts()).toEqual([]);
  });

  it('returns null at once, claiming nothing anywhere, when the caller’s signal is already aborted', async () => {
    const f = setup();
    f.peers.set('b', { peek: poolState(100), next: answersWith(stepBody('on-b')) });
    f.here.oldest = 200;
    f.here.steps.push(localClaim('here'));

    expect(await f.pool.claim(10_000, AbortSignal.abort(), undefined, CALLER)).toBeNull();
    expect(f.posts()).toEqual([]);
    expect(f.here.steps).toHaveLength(1);
    expect(f.hereCalls.filter((c) => c.waitMs > 0)).toEqual([]);
  });

  it('a caller that leaves while it waits ends the wait and gets null, and nothing is asked again', async () => {
    const f = setup();
    f.peers.set('b', { peek: poolState(null), next: status(204) });
    const caller = new AbortController();

    const claim = f.pool.claim(10_000, caller.signal, undefined, CALLER);
    const wait = await f.nextWait();
    caller.abort();

    expect(wait.signal!.aborted).toBe(true);
    expect(await claim).toBeNull();
    expect(f.peeks()).toBe(1);
  });
});

describe('ClusterPool: the caller goes with every peer call', () => {
  it('passes the caller’s key and request id on every peek and forwarded claim, before and after a wait', async () => {
    const f = setup();
    const fromC = stepBody('on-c');
    const c: FakePeer = { peek: poolState(null), next: answersWith(fromC) };
    f.peers.set('b', { peek: poolState(null), next: status(204) });
    f.peers.set('c', c);
    const caller: Caller = { authorization: 'Bearer another-key', requestId: 'req-99' };

    const claim = f.pool.claim(10_000, undefined, undefined, caller);
    await f.nextWait();
    f.peers.set('b', { peek: poolState(10), next: status(204) });
    c.peek = poolState(20);
    f.board.heard('instance-other');

    expect(await claim).toEqual({ forwarded: fromC });
    expect(f.posts()).toEqual(['b', 'c']);
    expect(f.calls).toHaveLength(6);
    for (const { call } of f.calls) {
      expect(call.authorization).toBe('Bearer another-key');
      expect(call.requestId).toBe('req-99');
      expect(call.timeoutMs).toBeGreaterThan(0);
    }
  });

  it('passes on a caller without a key as such', async () => {
    const f = setup();
    f.peers.set('b', { peek: poolState(1), next: answersWith(stepBody('on-b')) });

    await f.pool.claim(0, undefined, undefined, { authorization: undefined, requestId: 'req-1' });

    expect(f.calls).toHaveLength(2);
    for (const { call } of f.calls) {
      expect(call.authorization).toBeUndefined();
      expect(call.requestId).toBe('req-1');
    }
  });
});

describe('ClusterPool: when the other instances cannot be known', () => {
  it('claims here, and logs why, when the database cannot say which instances hold forests', async () => {
    const f = setup({ peersFail: true });
    f.here.oldest = 100;
    f.here.steps.push(localClaim('here'));

    const claim = await f.pool.claim(0, undefined, undefined, CALLER);

    expect(claim).toEqual({ local: localClaim('here') });
    expect(f.calls).toEqual([]);
    expect(f.warn).toHaveBeenCalledTimes(1);
  });

  it('gives the forwarded claim the caller’s signal, so a caller that leaves abandons it', async () => {
    const f = setup();
    f.peers.set('b', { peek: poolState(100), next: answersWith(stepBody('on-b')) });
    const signal = new AbortController().signal;

    await f.pool.claim(0, signal, undefined, CALLER);

    expect(f.calls.find((c) => c.call.method === 'POST')?.call.signal).toBe(signal);
  });
});
