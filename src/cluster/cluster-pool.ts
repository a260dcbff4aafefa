/**
 * The worker pool across the cluster (`POST /v1/steps/next` without `rootId`): a claim on any
 * instance hands out a step of any forest, the one parked longest anywhere first, and each
 * step exactly once. Every instance's steps stay in its own dispatcher, which claims them
 * atomically; what crosses instances is a question (when was your oldest step parked?) and a
 * claim forwarded to the instance whose answer was the oldest. A forwarded claim is answered
 * from that instance's own steps (FORWARDED_BY), so claims never travel further.
 *
 * With nothing parked anywhere, the claim long-polls here and looks again when another
 * instance announces work (work-board.ts). Two claims racing for one instance's oldest step
 * both stay exact: the loser gets that instance's next step, or looks again.
 *
 * FIFO across instances compares their clocks: steps parked within the clocks' skew of each
 * other may be handed out in either order.
 */
import type { Logger } from 'pino';
import type { Caller, LocalClaim, PoolClaim, PoolState } from '../topology/topology.js';
import type { Peer, PeerClient } from './peers.js';
import type { WorkBoard } from './work-board.js';

export interface ClusterPoolDeps {
  /** This instance's own pool claim, of any forest. */
  claimHere: (waitMs: number, signal: AbortSignal | undefined, since: string | undefined) => Promise<LocalClaim | null>;
  /** When this instance's oldest parked step was parked, if one is. */
  oldestHere: () => number | undefined;
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

  async claim(waitMs: number, signal: AbortSignal | undefined, since: string | undefined, caller: Caller): Promise<PoolClaim | null> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      // Listening before looking: news that arrives while the others are asked is not missed.
      const wake = new AbortController();
      const stopListening = this.deps.board.onWork(() => wake.abort());
      try {
        for (const candidate of await this.candidates(caller)) {
          const claimed = await this.claimFrom(candidate.peer, since, caller, signal);
          if (claimed !== null) return claimed;
        }
        const remaining = deadline - Date.now();
        if (remaining <= 0 || isAborted(signal)) return null;
        if (!wake.signal.aborted) {
          const waited = await this.waitHere(remaining, wake, signal, since);
          if (waited !== null) return { local: waited };
        }
      } finally {
        stopListening();
      }
      if (isAborted(signal) || Date.now() >= deadline) return null;
    }
  }

  /** Where steps are parked now, the longest-parked first (this instance as `peer: undefined`). */
  private async candidates(caller: Caller): Promise<Candidate[]> {
    const peers = await this.deps.peers().catch((err: unknown) => {
      this.deps.logger?.warn({ err }, 'the other instances could not be read from the database; this claim looks here only');
      return [];
    });
    const states = await Promise.all(peers.map(async (peer) => ({ peer, oldestAt: await this.oldestAt(peer, caller) })));
    const found: Candidate[] = [];
    for (const { peer, oldestAt } of states) if (oldestAt !== undefined) found.push({ peer, oldestAt });
    const here = this.deps.oldestHere();
    if (here !== undefined) found.push({ peer: undefined, oldestAt: here });
    return found.sort((a, b) => a.oldestAt - b.oldestAt);
  }

  private async oldestAt(peer: Peer, caller: Caller): Promise<number | undefined> {
    try {
      const answer = await this.deps.client.call(peer, { method: 'GET', path: '/v1/cluster/pool', ...caller, timeoutMs: ASK_TIMEOUT_MS });
      if (answer.status === 200) return (JSON.parse(answer.body.toString('utf8')) as PoolState).oldestParkedAt ?? undefined;
      this.deps.logger?.warn({ peer, status: answer.status }, 'an instance refused to say what its pool holds');
    } catch (err) {
      this.deps.logger?.warn({ err, peer }, 'an instance did not say what its pool holds');
    }
    return undefined;
  }

  /** One step from this instance (no peer) or from that one, without waiting. */
  private async claimFrom(peer: Peer | undefined, since: string | undefined, caller: Caller, signal: AbortSignal | undefined): Promise<PoolClaim | null> {
    if (peer === undefined) {
      const here = await this.deps.claimHere(0, signal, since);
      return here === null ? null : { local: here };
    }
    if (isAborted(signal)) return null;
    try {
      const body = since === undefined ? { waitMs: 0 } : { waitMs: 0, since };
      const answer = await this.deps.client.call(peer, { method: 'POST', path: '/v1/steps/next', ...caller, body, timeoutMs: CLAIM_TIMEOUT_MS, signal });
      if (answer.status === 200) return { forwarded: answer.body };
      if (answer.status !== 204) this.deps.logger?.warn({ peer, status: answer.status }, 'an instance refused a forwarded pool claim');
    } catch (err) {
      this.deps.logger?.warn({ err, peer }, 'an instance did not answer a forwarded pool claim');
    }
    return null;
  }

  /** Wait for a step here until `wake` (another instance announced work) or the caller goes. */
  private async waitHere(waitMs: number, wake: AbortController, signal: AbortSignal | undefined, since: string | undefined): Promise<LocalClaim | null> {
    const onAbort = (): void => wake.abort();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await this.deps.claimHere(waitMs, wake.signal, since);
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }
}

/** Read through a function: the signal may have been aborted while the caller awaited. */
function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}
