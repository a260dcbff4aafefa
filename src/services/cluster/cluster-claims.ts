/**
 * The worker pool across the cluster (`POST /v1/steps/next` without `rootId`): a claim on any
 * instance hands out a step of any forest, each claimed exactly once. Every instance's steps
 * stay in its own dispatcher, which claims them atomically; what crosses instances is the news
 * that one has steps nobody there is waiting for (the work board) and a claim forwarded to it.
 *
 * A claim takes this instance's oldest step first, then asks the instances that announced work,
 * the longest-waiting first; with nothing anywhere it long-polls here and wakes early when
 * another instance announces work. A forwarded claim is answered from that instance's own
 * steps (FORWARDED_BY), so claims never travel further.
 */
import type { Logger } from 'pino';
import type { RenderedStep } from '../steps/rendered-step.js';
import type { Caller } from './cluster-list.js';
import type { Peer, PeerClient } from './peers.js';
import type { WorkBoard } from './work-board.js';

export type LocalClaim = { agentId: string; agentToken: string; step: RenderedStep };

/** A step claimed here, or the JSON body another instance answered its claim with. */
export type ClusterClaim = { local: LocalClaim } | { forwarded: Buffer };

export interface ClusterClaimsDeps {
  /** This instance's own pool claim (step-protocol's claimAny without a forest). */
  claimHere: (waitMs: number, signal: AbortSignal | undefined, since: string | undefined) => Promise<LocalClaim | null>;
  /** When this instance's oldest parked pool step was parked, if one is. */
  oldestHere: () => number | undefined;
  board: WorkBoard;
  peers: PeerClient;
  logger?: Logger | undefined;
}

const PEER_TIMEOUT_MS = 5_000;

export class ClusterClaims {
  constructor(private readonly deps: ClusterClaimsDeps) {}

  async claim(waitMs: number, signal: AbortSignal | undefined, since: string | undefined, caller: Caller): Promise<ClusterClaim | null> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      // FIFO across the cluster: the steps parked elsewhere before this instance's oldest come first.
      const oldestHere = this.deps.oldestHere();
      if (oldestHere !== undefined) {
        const earlier = await this.claimElsewhere(this.deps.board.withWork(oldestHere), since, caller);
        if (earlier !== null) return { forwarded: earlier };
      }
      const here = await this.deps.claimHere(0, signal, since);
      if (here !== null) return { local: here };
      const there = await this.claimElsewhere(this.deps.board.withWork(), since, caller);
      if (there !== null) return { forwarded: there };
      const remaining = deadline - Date.now();
      if (remaining <= 0 || signal?.aborted === true) return null;
      // Wait here, and stop waiting when another instance announces work.
      const wake = new AbortController();
      const onAbort = (): void => wake.abort();
      signal?.addEventListener('abort', onAbort, { once: true });
      const stopListening = this.deps.board.onWork(() => wake.abort());
      try {
        const waited = await this.deps.claimHere(remaining, wake.signal, since);
        if (waited !== null) return { local: waited };
      } finally {
        stopListening();
        signal?.removeEventListener('abort', onAbort);
      }
      if (isAborted(signal) || Date.now() >= deadline) return null;
    }
  }

  /** Ask these instances (that announced work, the longest-waiting first) for one step. */
  private async claimElsewhere(peers: readonly Peer[], since: string | undefined, caller: Caller): Promise<Buffer | null> {
    for (const peer of peers) {
      try {
        const body = since === undefined ? { waitMs: 0 } : { waitMs: 0, since };
        const answer = await this.deps.peers.call(peer, { method: 'POST', path: '/v1/steps/next', ...caller, body, timeoutMs: PEER_TIMEOUT_MS });
        if (answer.status === 200) return answer.body;
        this.deps.board.drained(peer.instanceId);
        if (answer.status !== 204) this.deps.logger?.warn({ peer, status: answer.status }, 'an instance refused a forwarded pool claim');
      } catch (err) {
        this.deps.board.drained(peer.instanceId);
        this.deps.logger?.warn({ err, peer }, 'an instance did not answer a forwarded pool claim');
      }
    }
    return null;
  }
}

/** Read through a function: the signal may have been aborted while this awaited. */
function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}
