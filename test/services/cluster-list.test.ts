/**
 * ClusterList with a fake local page, fake peers and a fake peer client: this instance's page
 * and every peer's page (asked with the same limit, status, kind and cursor, and the caller's key)
 * merged in list order (createdAt, then id) and cut at the limit; the cursor after the page
 * when more follow anywhere, null otherwise; a peer that fails or refuses is left out of the
 * page, logged, and the rest still returned.
 */
import type { Logger } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import type { AgentView } from '../../src/contract/index.js';
import type { ListFilter } from '../../src/agents/reads/agent-queries.js';
import { decodeCursor, encodeCursor } from '../../src/agents/reads/list-order.js';
import { ClusterList } from '../../src/cluster/cluster-list.js';
import type { Peer, PeerAnswer, PeerCall, PeerClient } from '../../src/cluster/peers.js';
import type { AgentPage, Caller } from '../../src/topology/topology.js';

const CALLER: Caller = { authorization: 'Bearer operator-key', requestId: 'req-42' };

function view(id: string, createdAt: string): AgentView {
  return { id, createdAt, status: 'idle' } as unknown as AgentView;
}

function peer(instanceId: string): Peer {
  return { instanceId, url: `http://${instanceId}.invalid:1` };
}

function ok(page: AgentPage): PeerAnswer {
  return { status: 200, body: Buffer.from(JSON.stringify(page)) };
}

type Answer = (call: PeerCall) => Promise<PeerAnswer>;

function setup(local: AgentPage, answers: Record<string, Answer>): {
  list: ClusterList;
  calls: { peer: Peer; call: PeerCall }[];
  localFilters: ListFilter[];
  warn: ReturnType<typeof vi.fn>;
} {
  const calls: { peer: Peer; call: PeerCall }[] = [];
  const localFilters: ListFilter[] = [];
  const warn = vi.fn();
  const client = {
    call: (p: Peer, call: PeerCall): Promise<PeerAnswer> => {
      calls.push({ peer: p, call });
      const answer = answers[p.instanceId];
      if (answer === undefined) throw new Error(`no fake for ${p.instanceId}`);
      return answer(call);
    },
  } as unknown as PeerClient;
  const list = new ClusterList({
    local: (filter) => {
      localFilters.push(filter);
      return Promise.resolve(local);
    },
    peers: () => Promise.resolve(Object.keys(answers).map(peer)),
    client,
    logger: { warn } as unknown as Logger,
  });
  return { list, calls, localFilters, warn };
}

const ids = (page: AgentPage): string[] => page.items.map((v) => v.id);

describe('ClusterList', () => {
  it('merges this instance’s page and the peers’ pages in list order', async () => {
    const { list } = setup({ items: [view('a', '2026-01-01T00:00:01.000Z'), view('d', '2026-01-01T00:00:04.000Z')], nextCursor: null }, {
      b: () => Promise.resolve(ok({ items: [view('b', '2026-01-01T00:00:02.000Z'), view('e', '2026-01-01T00:00:05.000Z')], nextCursor: null })),
      c: () => Promise.resolve(ok({ items: [view('c', '2026-01-01T00:00:03.000Z')], nextCursor: null })),
    });

    const page = await list.list({ limit: 10 }, CALLER);

    expect(ids(page)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(page.nextCursor).toBeNull();
  });

  it('orders agents created at the same time by id', async () => {
    const at = '2026-01-01T00:00:00.000Z';
    const { list } = setup({ items: [view('m', at), view('z', at)], nextCursor: null }, {
      p: () => Promise.resolve(ok({ items: [view('a', at), view('q', at)], nextCursor: null })),
    });

    const page = await list.list({ limit: 10 }, CALLER);

    expect(ids(page)).toEqual(['a', 'm', 'q', 'z']);
  });

  it('cuts the merged page at the limit, with the cursor of its last item', async () => {
    const { list } = setup({ items: [view('a', '2026-01-01T00:00:01.000Z'), view('c', '2026-01-01T00:00:03.000Z')], nextCursor: null }, {
      p: () => Promise.resolve(ok({ items: [view('b', '2026-01-01T00:00:02.000Z'), view('d', '2026-01-01T00:00:04.000Z')], nextCursor: null })),
    });

    const page = await list.list({ limit: 3 }, CALLER);

    expect(ids(page)).toEqual(['a', 'b', 'c']);
    expect(page.nextCursor).not.toBeNull();
    expect(decodeCursor(page.nextCursor!)).toEqual({ createdAt: '2026-01-01T00:00:03.000Z', id: 'c' });
  });

  it('sets the cursor when a page said more follow, though the merged items fit the limit', async () => {
    const c = view('c', '2026-01-01T00:00:03.000Z');
    const { list } = setup({ items: [view('a', '2026-01-01T00:00:01.000Z')], nextCursor: null }, {
      p: () => Promise.resolve(ok({ items: [c], nextCursor: encodeCursor(c) })),
    });

    const page = await list.list({ limit: 2 }, CALLER);

    expect(ids(page)).toEqual(['a', 'c']);
    expect(page.nextCursor).toBe(encodeCursor(c));
  });

  it('has no cursor when the merged items fill the limit exactly and no page has more', async () => {
    const { list } = setup({ items: [view('a', '2026-01-01T00:00:01.000Z')], nextCursor: null }, {
      p: () => Promise.resolve(ok({ items: [view('b', '2026-01-01T00:00:02.000Z')], nextCursor: null })),
    });

    const page = await list.list({ limit: 2 }, CALLER);

    expect(ids(page)).toEqual(['a', 'b']);
    expect(page.nextCursor).toBeNull();
  });

  it('an empty cluster is an empty page without a cursor', async () => {
    const { list } = setup({ items: [], nextCursor: null }, { p: () => Promise.resolve(ok({ items: [], nextCursor: null })) });

    expect(await list.list({ limit: 5 }, CALLER)).toEqual({ items: [], nextCursor: null });
  });

  it('asks every peer for the same limit, status, kind and cursor, with the caller’s key and request id', async () => {
    const empty = (): Promise<PeerAnswer> => Promise.resolve(ok({ items: [], nextCursor: null }));
    const { list, calls, localFilters } = setup({ items: [], nextCursor: null }, { p: empty, q: empty });
    const cursor = encodeCursor(view('x', '2026-01-01T00:00:09.000Z'));

    await list.list({ limit: 7, status: 'running', kind: 'root', cursor }, CALLER);

    expect(localFilters).toEqual([{ limit: 7, status: 'running', kind: 'root', cursor }]);
    expect(calls.map((c) => c.peer.instanceId).sort()).toEqual(['p', 'q']);
    for (const { call } of calls) {
      expect(call.method).toBe('GET');
      const url = new URL(call.path, 'http://peer.invalid');
      expect(url.pathname).toBe('/v1/agents');
      expect(Object.fromEntries(url.searchParams)).toEqual({ limit: '7', status: 'running', kind: 'root', cursor });
      expect(call.authorization).toBe(CALLER.authorization);
      expect(call.requestId).toBe(CALLER.requestId);
      expect(call.timeoutMs).toBeGreaterThan(0);
    }
  });

  it('passes on only the limit when no status or cursor is asked for', async () => {
    const { list, calls } = setup({ items: [], nextCursor: null }, { p: () => Promise.resolve(ok({ items: [], nextCursor: null })) });

    await list.list({ limit: 3 }, { authorization: undefined, requestId: 'req-1' });

    expect(calls).toHaveLength(1);
    expect(calls[0]!.call.path).toBe('/v1/agents?limit=3');
    expect(calls[0]!.call.authorization).toBeUndefined();
    expect(calls[0]!.call.requestId).toBe('req-1');
  });

  it('leaves out a peer that fails or refuses, logs it, and returns the rest', async () => {
    const { list, warn } = setup({ items: [view('a', '2026-01-01T00:00:01.000Z')], nextCursor: null }, {
      down: () => Promise.reject(new Error('connect ECONNREFUSED')),
      refusing: () => Promise.resolve({ status: 500, body: Buffer.from('{"error":"boom"}') }),
      unauthorized: () => Promise.resolve({ status: 401, body: Buffer.from('{}') }),
      fine: () => Promise.resolve(ok({ items: [view('b', '2026-01-01T00:00:02.000Z')], nextCursor: null })),
    });

    const page = await list.list({ limit: 10 }, CALLER);

    expect(ids(page)).toEqual(['a', 'b']);
    expect(page.nextCursor).toBeNull();
    expect(warn).toHaveBeenCalledTimes(3);
    const logged = warn.mock.calls.map((c) => (c[0] as { peer: Peer }).peer.instanceId).sort();
    expect(logged).toEqual(['down', 'refusing', 'unauthorized']);
  });

  it('a peer answering 200 with a body that is not JSON is left out like one that failed', async () => {
    const { list, warn } = setup({ items: [view('a', '2026-01-01T00:00:01.000Z')], nextCursor: null }, {
      garbled: () => Promise.resolve({ status: 200, body: Buffer.from('<html>proxy error</html>') }),
    });

    const page = await list.list({ limit: 10 }, CALLER);

    expect(ids(page)).toEqual(['a']);
    expect(warn).toHaveBeenCalledTimes(1);
  });

  it('lists an agent found in two pages (its forest moved while they were read) once', async () => {
    const { list } = setup({ items: [view('a', '2026-01-01T00:00:01.000Z'), view('moved', '2026-01-01T00:00:02.000Z')], nextCursor: null }, {
      b: () => Promise.resolve(ok({ items: [view('moved', '2026-01-01T00:00:02.000Z'), view('c', '2026-01-01T00:00:03.000Z')], nextCursor: null })),
    });

    const page = await list.list({ limit: 10 }, CALLER);

    expect(ids(page)).toEqual(['a', 'moved', 'c']);
  });

  it('answers with this instance’s page, and logs why, when the other instances cannot be read from the database', async () => {
    const warn = vi.fn();
    const list = new ClusterList({
      local: () => Promise.resolve({ items: [view('a', '2026-01-01T00:00:01.000Z')], nextCursor: null }),
      peers: () => Promise.reject(new Error('connection terminated')),
      client: { call: () => Promise.reject(new Error('no peer may be called')) } as unknown as PeerClient,
      logger: { warn } as unknown as Logger,
    });

    const page = await list.list({ limit: 10 }, CALLER);

    expect(ids(page)).toEqual(['a']);
    expect(warn).toHaveBeenCalledTimes(1);
  });
});
