/**
 * One webhook delivery attempt: a single HTTP POST, its outcome told as a value, never thrown.
 *
 * The attempt is bounded in every direction a receiver could stretch it: one timer covers the
 * whole exchange (resolving, connecting, waiting and reading); at most `maxResponseBytes` of
 * the answer are read before the connection is dropped; redirects are not followed, so a 3xx
 * is an answer like any other. The destination passes the address guard, by the lookup the
 * connection resolves through, or before connecting when the host is an IP literal (which
 * the client connects to without a lookup).
 *
 * Error messages are the transport's own short ones (`connect ECONNREFUSED 127.0.0.1:1234`),
 * with any request header value cut out: the headers carry the signature.
 *
 * Every attempt opens its own connection: a pooled one could have been opened under another
 * attempt's address policy.
 */
import { request as httpRequest, type ClientRequest, type IncomingMessage, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import { guardedLookup, parseWebhookUrl, resolvePublic, WebhookAddressError } from './address-guard.js';

/** One POST to send. */
export interface WebhookRequest {
  url: URL;
  headers: Record<string, string>;
  body: string;
  timeoutMs: number;
  maxResponseBytes: number;
  allowPrivate: boolean;
}

/**
 * How an attempt ended: the receiver's answer (`body` is at most `maxResponseBytes` bytes of
 * it, decoded as UTF-8), or why there was none.
 */
export type SendOutcome =
  | { kind: 'response'; status: number; retryAfter: string | undefined; body: string }
  | { kind: 'error'; reason: 'timeout' | 'network' | 'address'; message: string };

const USER_AGENT = 'agentforest-webhooks';
const REDACTED = '[redacted]';

/** POST `request.body` to `request.url`; resolves with the outcome and never rejects. */
export function sendWebhook(request: WebhookRequest): Promise<SendOutcome> {
  return new Promise<SendOutcome>((resolve) => {
    let settled = false;
    let outgoing: ClientRequest | undefined;
    const settle = (outcome: SendOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      outgoing?.destroy();
      resolve(outcome);
    };
    const fail = (error: unknown): void => settle(failure(error, request.headers));
    const timer = setTimeout(
      () => settle({ kind: 'error', reason: 'timeout', message: `timed out after ${request.timeoutMs} ms` }),
      request.timeoutMs,
    );

    checkedUrl(request).then((url) => {
      if (settled) return;
      outgoing = open(url, request, (response) => readResponse(response, request.maxResponseBytes, settle, fail));
      outgoing.on('error', fail);
      outgoing.end(request.body);
    }).catch(fail);
  });
}

/** The URL, once its scheme and credentials pass and, for an IP literal host, its address. */
async function checkedUrl(request: WebhookRequest): Promise<URL> {
  const url = parseWebhookUrl(request.url.href);
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (isIP(host) !== 0) await resolvePublic(host, request.allowPrivate);
  return url;
}

function open(url: URL, request: WebhookRequest, onResponse: (response: IncomingMessage) => void): ClientRequest {
  const options: RequestOptions = {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'user-agent': USER_AGENT,
      ...request.headers,
      'content-length': String(Buffer.byteLength(request.body)),
    },
    lookup: guardedLookup(request.allowPrivate),
    agent: false,
  };
  return url.protocol === 'https:' ? httpsRequest(url, options, onResponse) : httpRequest(url, options, onResponse);
}

/** Read at most `maxBytes` of the body, then settle with the response and stop reading. */
function readResponse(
  response: IncomingMessage,
  maxBytes: number,
  settle: (outcome: SendOutcome) => void,
  fail: (error: unknown) => void,
): void {
  const chunks: Buffer[] = [];
  let length = 0;
  const finish = (): void => {
    const retryAfter = response.headers['retry-after'];
    settle({ kind: 'response', status: response.statusCode ?? 0, retryAfter, body: Buffer.concat(chunks).toString('utf8') });
    response.destroy();
  };
  response.on('error', fail);
  response.on('end', finish);
  response.on('close', () => {
    if (!response.complete) fail(new Error('the connection closed before the response ended'));
  });
  response.on('data', (chunk: Buffer) => {
    const room = maxBytes - length;
    if (chunk.length < room) {
      chunks.push(chunk);
      length += chunk.length;
      return;
    }
    chunks.push(chunk.subarray(0, room));
    length = maxBytes;
    response.pause();
    finish();
  });
  if (maxBytes <= 0) finish();
}

function failure(error: unknown, headers: Record<string, string>): SendOutcome {
  const message = redact(error instanceof Error ? error.message : String(error), headers);
  if (error instanceof WebhookAddressError) return { kind: 'error', reason: 'address', message };
  return { kind: 'error', reason: 'network', message };
}

/** `message` with every request header value in it replaced. */
function redact(message: string, headers: Record<string, string>): string {
  let redacted = message;
  for (const value of Object.values(headers)) {
    if (value !== '') redacted = redacted.split(value).join(REDACTED);
  }
  return redacted;
}
