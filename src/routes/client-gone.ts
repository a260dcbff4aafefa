/**
 * An AbortSignal that fires when the client goes away before its response is written, so a
 * long-poll that lost its caller never claims a step and a tool call is not admitted for
 * nobody.
 */
import type { FastifyReply } from 'fastify';

export function clientGone(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  // 'close' also fires after a normal response; only an unfinished response means the client left.
  reply.raw.once('close', () => {
    if (!reply.raw.writableEnded) controller.abort();
  });
  return controller.signal;
}
