import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterEach, describe, expect, it } from 'vitest';
import { sendWebhook, type WebhookRequest } from '../../../src/observation/webhooks/sender.js';
import { generateSecret, parseSecret, signatureHeaders } from '../../../src/observation/webhooks/signing.js';

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  method: string | undefined;
}

interface Loopback {
  url: URL;
  received: Received[];
  connections: () => number;
}

const servers: Server[] = [];

afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

/** A server on 127.0.0.1 that records each request, its body read in full, then lets `answer` reply. */
async function loopback(answer: (req: IncomingMessage, res: ServerResponse) => void): Promise<Loopback> {
  const received: Received[] = [];
  let connections = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), method: req.method });
      answer(req, res);
    });
  });
  server.on('connection', () => connections++);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  return { url: new URL(`http://127.0.0.1:${port}/hooks/in?tenant=1`), received, connections: () => connections };
}

const body = JSON.stringify({ type: 'agent.finished', data: { agentId: 'agt_1', text: 'fertig ✓' } });
const secret = generateSecret();
const signed = (): Record<string, string> => ({ ...signatureHeaders(parseSecret(secret), 'msg_1', Math.floor(Date.now() / 1000), body) });

function post(url: URL, overrides: Partial<WebhookRequest> = {}): WebhookRequest {
  return { url, headers: signed(), body, timeoutMs: 5000, maxResponseBytes: 4096, allowPrivate: true, ...overrides };
}

describe('sendWebhook', () => {
  it('POSTs the body and signed headers and returns the answer', async () => {
    const server = await loopback((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('received ✓'));
    const headers = signed();

    const outcome = await sendWebhook(post(server.url, { headers }));

    expect(outcome).toEqual({ kind: 'response', status: 200, retryAfter: undefined, body: 'received ✓' });
    expect(server.received).toHaveLength(1);
    const [seen] = server.received;
    expect(seen?.method).toBe('POST');
    expect(seen?.body).toBe(body);
    expect(seen?.headers).toMatchObject({
      'content-type': 'application/json',
      'user-agent': 'agentforest-webhooks',
      'content-length': String(Buffer.byteLength(body)),
      'webhook-id': headers['webhook-id'],
      'webhook-timestamp': headers['webhook-timestamp'],
      'webhook-signature': headers['webhook-signature'],
    });
    expect(new Webhook(secret).verify(seen?.body ?? '', seen?.headers as Record<string, string>)).toEqual(JSON.parse(body));
  });

  it('returns a redirect as the answer without following it', async () => {
    const target = await loopback((_req, res) => res.writeHead(200).end());
    const redirecting = await loopback((_req, res) => res.writeHead(302, { location: target.url.href }).end());

    const outcome = await sendWebhook(post(redirecting.url));

    expect(outcome).toMatchObject({ kind: 'response', status: 302 });
    expect(redirecting.received).toHaveLength(1);
    expect(target.connections()).toBe(0);
  });

  it('returns the Retry-After the receiver sent', async () => {
    const server = await loopback((_req, res) => res.writeHead(503, { 'retry-after': '120' }).end('busy'));
    expect(await sendWebhook(post(server.url))).toEqual({ kind: 'response', status: 503, retryAfter: '120', body: 'busy' });
  });

  it('reads no more of a huge answer than the cap, and hangs up on the rest', async () => {
    const chunk = Buffer.alloc(64 * 1024, 'a');
    const total = 100 * 1024 * 1024;
    let hungUp!: Promise<boolean>;
    const server = await loopback((_req, res) => {
      hungUp = new Promise((resolve) => res.on('close', () => resolve(!res.writableFinished)));
      res.on('error', () => undefined);
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(total) });
      let sent = 0;
      const pump = (): void => {
        while (sent < total && !res.destroyed) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        if (sent >= total) res.end();
      };
      pump();
    });
    const cap = 64 * 1024 + 7;

    const outcome = await sendWebhook(post(server.url, { maxResponseBytes: cap }));

    expect(outcome.kind).toBe('response');
    expect(outcome.kind === 'response' && outcome.body.length).toBe(cap);
    expect(await hungUp).toBe(true);
  });

  it('returns an empty body when no response bytes are wanted', async () => {
    const server = await loopback((_req, res) => res.writeHead(204).end());
    expect(await sendWebhook(post(server.url, { maxResponseBytes: 0 }))).toEqual({
      kind: 'response',
      status: 204,
      retryAfter: undefined,
      body: '',
    });
  });

  it('times out on a receiver that never answers', async () => {
    const server = await loopback(() => undefined);
    const outcome = await sendWebhook(post(server.url, { timeoutMs: 200 }));
    expect(outcome).toEqual({ kind: 'error', reason: 'timeout', message: 'timed out after 200 ms' });
  });

  it('is a network error when nothing listens, its message free of the headers', async () => {
    const server = await loopback((_req, res) => res.end());
    const closed = servers.pop()!;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const headers = signed();

    const outcome = await sendWebhook(post(server.url, { headers }));

    expect(outcome).toMatchObject({ kind: 'error', reason: 'network' });
    expect(outcome.kind === 'error' && outcome.message).toContain('ECONNREFUSED');
    expect(JSON.stringify(outcome)).not.toContain(headers['webhook-signature']!.slice(3));
  });

  it('is a network error when the answer is cut off', async () => {
    const server = await loopback((_req, res) => {
      res.writeHead(200, { 'content-length': '1000' });
      res.write('only the start', () => res.socket?.destroy());
    });
    expect(await sendWebhook(post(server.url))).toMatchObject({ kind: 'error', reason: 'network' });
  });

  it('does not repeat a header value the request refused to carry', async () => {
    const server = await loopback((_req, res) => res.end());
    const outcome = await sendWebhook(post(server.url, { headers: { ...signed(), authorization: 'Bearer tok-secret\r\nx-evil: 1' } }));
    expect(outcome).toMatchObject({ kind: 'error', reason: 'network' });
    expect(JSON.stringify(outcome)).not.toContain('tok-secret');
    expect(server.connections()).toBe(0);
  });

  it('refuses loopback destinations unless private ones are allowed, without connecting', async () => {
    const server = await loopback((_req, res) => res.end());
    const port = server.url.port;
    for (const host of ['127.0.0.1', 'localhost', '[::1]', '[::ffff:127.0.0.1]']) {
      const outcome = await sendWebhook(post(new URL(`http://${host}:${port}/hooks/in`), { allowPrivate: false }));
      expect(outcome, host).toMatchObject({ kind: 'error', reason: 'address' });
    }
    expect(server.connections()).toBe(0);
    expect(server.received).toHaveLength(0);
  });

  it('refuses a URL that is not http(s) or carries credentials', async () => {
    expect(await sendWebhook(post(new URL('ftp://127.0.0.1/x')))).toMatchObject({ kind: 'error', reason: 'address' });
    const withCredentials = await sendWebhook(post(new URL('http://user:hunter22@127.0.0.1/x')));
    expect(withCredentials).toMatchObject({ kind: 'error', reason: 'address' });
    expect(JSON.stringify(withCredentials)).not.toContain('hunter22');
  });
});
