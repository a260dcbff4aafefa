/**
 * A worker pool across the cluster: the step pool (`POST /v1/steps/next` without `rootId`) and
 * the tool worker pool (`POST /v1/tool-calls/next`). A claim on any instance hands out the work
 * waiting longest anywhere first, and each piece exactly once. Every instance's work stays in
 * its own pool, which hands it out atomically; what crosses instances is a question (when was
 * your oldest work parked?) and a claim forwarded to the instance whose answer was the oldest.
 * A forwarded claim is answered from that instance's own work (FORWARDED_BY), so claims never
 * travel further.
 *
 * With nothing parked anywhere, the claim long-polls here and looks again when another
 * instance announces work on the pool's board (work-board.ts). Two claims racing for one
 * instance's oldest work both stay exact: the loser gets that instance's next, or looks again.
 *
 * FIFO across instances compares their clocks: work parked within the clocks' skew of each
 * other may be handed out in either order.
 */
import type { Logger } from 'pino';
import type { Caller, Claimed, PoolState } from '../topology/topology.js';
import type { Peer, PeerClient } from './peers.js';
import type { WorkBoard } from './work-board.js';

/** One claim's view of a pool: what it takes here, and what it asks the other instances. */
export interface PoolQuery<L> {
  /** This instance's own claim of what the query matches, waiting up to `waitMs`. */
  claimHere: (waitMs: number, signal: AbortSignal | undefined) => Promise<L | null>;
  /** When the oldest work here that the query matches was parked, if any is. */
  oldestHere: () => number | undefined;
  /** Asked of another instance: answers its PoolState for the same query. */
  state: { method: 'GET' | 'POST'; path: string; body?: unknown };
  /** The same claim, forwarded to another instance without a wait. */
  claim: { path: string; body: unknown };
}

export interface ClusterPoolDeps {
  /** The other instances that hold forests now. */
  peers: () => Promise<Peer[]>;
  client: PeerClient;
  board: WorkBoard;
  logger?: Logger | undefined;
}

/** A live instance answers what its pool holds in milliseconds; one that does not is skipped for this claim. */
const ASK_TIMEOUT_MS = 1_000;
/** A forwarded claim does not wait (`waitMs: 0`), so its answer is as quick. */
const CLAIM_TIMEOUT_MS = 5_000;

type Candidate = { peer: Peer | undefined; oldestAt: number };

export class ClusterPool {
  constructor(private readonly deps: ClusterPoolDeps) {}

  async claim<L>(query: PoolQuery<L>, waitMs: number, signal: AbortSignal | undefined, caller: Caller): Promise<Claimed<L> | null> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      // Listening before looking: news that arrives while the others are asked is not missed.
      const wake = new AbortController();
      const stopListening = this.deps.board.onWork(() => wake.abort());
      try {
        for (const candidate of await this.candidates(query, caller)) {
          const claimed = await this.claimFrom(query, candidate.peer, caller, signal);
          if (claimed !== null) return claimed;
        }
        const remaining = deadline - Date.now();
        if (remaining <= 0 || isAborted(signal)) return null;
        if (!wake.signal.aborted) {
          const waited = await this.waitHere(query, remaining, wake, signal);
          if (waited !== null) return { local: waited };
        }
      } finally {
        stopListening();
      }
      if (isAborted(signal) || Date.now() >= deadline) return null;
    }
  }

  /** Where work is parked now, the longest-parked first (this instance as `peer: undefined`). */
  private async candidates(query: PoolQuery<unknown>, caller: Caller): Promise<Candidate[]> {
    const peers = await this.deps.peers().catch((err: unknown) => {
      this.deps.logger?.warn({ err }, 'the other instances could not be read from the database; this claim looks here only');
      return [];
    });
    const states = await Promise.all(peers.map(async (peer) => ({ peer, oldestAt: await this.oldestAt(query, peer, caller) })));
    const found: Candidate[] = [];
    for (const { peer, oldestAt } of states) if (oldestAt !== undefined) found.push({ peer, oldestAt });
    const here = query.oldestHere();
    if (here !== undefined) found.push({ peer: undefined, oldestAt: here });
    return found.sort((a, b) => a.oldestAt - b.oldestAt);
  }

  private async oldestAt(query: PoolQuery<unknown>, peer: Peer, caller: Caller): Promise<number | undefined> {
    try {
      const answer = await this.deps.client.call(peer, { ...query.state, ...caller, timeoutMs: ASK_TIMEOUT_MS });
      if (answer.status === 200) return (JSON.parse(answer.body.toString('utf8')) as PoolState).oldestParkedAt ?? undefined;
      this.deps.logger?.warn({ peer, status: answer.status }, 'an instance refused to say what its pool holds');
    } catch (err) {
      this.deps.logger?.warn({ err, peer }, 'an instance did not say what its pool holds');
    }
    return undefined;
  }

  /** One piece of work from this instance (no peer) or from that one, without waiting. */
  private async claimFrom<L>(query: PoolQuery<L>, peer: Peer | undefined, caller: Caller, signal: AbortSignal | undefined): Promise<Claimed<L> | null> {
    if (peer === undefined) {
      const here = await query.claimHere(0, signal);
      return here === null ? null : { local: here };
    }
    if (isAborted(signal)) return null;
    try {
      const answer = await this.deps.client.call(peer, { method: 'POST', ...query.claim, ...caller, timeoutMs: CLAIM_TIMEOUT_MS, signal });
      if (answer.status === 200) return { forwarded: answer.body };
      if (answer.status !== 204) this.deps.logger?.warn({ peer, status: answer.status }, 'an instance refused a forwarded pool claim');
    } catch (err) {
      this.deps.logger?.warn({ err, peer }, 'an instance did not answer a forwarded pool claim');
    }
    return null;
  }

  /** Wait for work here until `wake` (another instance announced work) or the caller goes. */
  private async waitHere<L>(query: PoolQuery<L>, waitMs: number, wake: AbortController, signal: AbortSignal | undefined): Promise<L | null> {
    const onAbort = (): void => wake.abort();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await query.claimHere(waitMs, wake.signal);
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }
}

/** Read through a function: the signal may have been aborted while the caller awaited. */
function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}
