/**
 * An AbortSignal that fires when the client goes away before its response is written, so a
 * long-poll that lost its caller never claims a step and a tool call is not admitted for
 * nobody.
 *
 * The signal belongs to the connection, made on its first request and shared by the requests
 * after it: every request still open on a connection (one, or several when pipelined) loses
 * its client when the connection closes, and a closed connection carries no later request.
 * One per connection rather than one per request, because a signal and its listener cost a
 * report call about 3% of its CPU (bench/, `--cpu-prof`).
 *
 * A tenant key's request also loses its client when the key is revoked (routes/auth.ts).
 */
import type { Socket } from 'node:net';
import type { FastifyReply } from 'fastify';

const byConnection = new WeakMap<Socket, AbortSignal>();

export function clientGone(reply: FastifyReply): AbortSignal {
  const gone = connectionClosed(reply);
  // A tenant key's long-poll also ends when the key is revoked: it must not be handed work.
  const revoked = reply.request.keyRevoked;
  return revoked === null ? gone : AbortSignal.any([gone, revoked]);
}

function connectionClosed(reply: FastifyReply): AbortSignal {
  // The request's socket, not the response's: a pipelined response gets its socket only when
  // the responses ahead of it are written.
  const socket = reply.request.raw.socket;
  let signal = byConnection.get(socket);
  if (signal === undefined) {
    const controller = new AbortController();
    signal = controller.signal;
    byConnection.set(socket, signal);
    if (socket.destroyed) controller.abort();
    else socket.once('close', () => controller.abort());
  }
  return signal;
}
