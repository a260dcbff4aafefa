/**
 * Calls from one instance to another, with several instances on one database: the questions a
 * cluster answers together (the whole list of live agents, a worker-pool claim of a step
 * another instance holds). One keep-alive pool per peer (undici). A call carries FORWARDED_BY,
 * so the peer answers from what it holds itself and never asks on, and the caller's own
 * operator key, so a peer grants nothing the caller could not have asked for directly.
 */
import { Agent, request } from 'undici';
import type { Caller } from '../topology/topology.js';

/** Set on a request one instance sends another, naming the sender. */
export const FORWARDED_BY = 'x-agentforest-forwarded-by';

/** Another live instance: its id and the base URL it advertises. */
export interface Peer {
  instanceId: string;
  url: string;
}

export interface PeerCall extends Caller {
  method: 'GET' | 'POST';
  /** Path and query, e.g. `/v1/agents?limit=10`. */
  path: string;
  body?: unknown;
  timeoutMs: number;
  /** The caller went away: abandon the call (the peer sees its client go, as a direct caller's would). */
  signal?: AbortSignal | undefined;
}

export interface PeerAnswer {
  status: number;
  body: Buffer;
}

const CONNECT_TIMEOUT_MS = 3_000;

export class PeerClient {
  private readonly dispatcher = new Agent({ keepAliveTimeout: 60_000, connect: { timeout: CONNECT_TIMEOUT_MS } });

  constructor(private readonly instanceId: string) {}

  async call(peer: Peer, call: PeerCall): Promise<PeerAnswer> {
    const headers: Record<string, string> = { [FORWARDED_BY]: this.instanceId, 'x-request-id': call.requestId };
    if (call.authorization !== undefined) headers.authorization = call.authorization;
    let body: string | null = null;
    if (call.body !== undefined) {
      body = JSON.stringify(call.body);
      headers['content-type'] = 'application/json';
    }
    const response = await request(`${peer.url.replace(/\/+$/, '')}${call.path}`, {
      method: call.method,
      headers,
      body,
      dispatcher: this.dispatcher,
      headersTimeout: call.timeoutMs,
      bodyTimeout: call.timeoutMs,
      ...(call.signal === undefined ? {} : { signal: call.signal }),
    });
    return { status: response.statusCode, body: Buffer.from(await response.body.arrayBuffer()) };
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }
}
