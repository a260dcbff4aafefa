/**
 * The round-robin proxy the cluster e2e runs behind (test/fixtures/round-robin-proxy.ts),
 * against two small node:http backends: strict turns with no affinity, headers and bodies
 * both ways, a streamed answer passed on as it is written, an abandoned answer's upstream
 * request ended, and the counts the cluster test asserts on.
 */
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { closeWithTest } from '../fixtures/cleanup.js';
import { startRoundRobinProxy } from '../fixtures/round-robin-proxy.js';
import { until } from '../fixtures/until.js';

interface Backend {
  url: string;
  /** Requests of /stream whose connection to this backend has closed. */
  closedStreams: number;
}

/**
 * A backend named `name`: /status/<n> answers n with `{backend, method, body, header}` (the
 * request's x-test header, echoed as x-echo); /stream writes one chunk and then holds.
 */
async function startBackend(name: string): Promise<Backend> {
  const backend: Backend = { url: '', closedStreams: 0 };
  const server: Server = createServer((req, res) => {
    if (req.url === '/stream') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: from ${name}\n\n`);
      req.socket.once('close', () => (backend.closedStreams += 1));
      return;
    }
    void readBody(req).then((body) => {
      const status = Number(req.url?.split('/')[2] ?? 200);
      res.writeHead(status, { 'content-type': 'application/json', 'x-echo': String(req.headers['x-test'] ?? '') });
      res.end(JSON.stringify({ backend: name, method: req.method, body }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closeWithTest(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  backend.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return backend;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * One POST over node:http. Not fetch: the Fetch standard retries a 421 once on a new
 * connection, which here would be the next backend's turn.
 */
async function post(url: string, headers: Record<string, string>, body: string): Promise<{ status: number; echo: unknown; json: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers }, (res) => {
      void readBody(res).then((text) => resolve({ status: res.statusCode ?? 0, echo: res.headers['x-echo'], json: JSON.parse(text) }), reject);
    });
    req.once('error', reject);
    req.end(body);
  });
}

describe('the round-robin proxy of the cluster tests', () => {
  it('sends each request to the next backend in turn, headers and bodies both ways, and counts answers by status and requests by backend', async () => {
    const [a, b] = await Promise.all([startBackend('a'), startBackend('b')]);
    const proxy = await startRoundRobinProxy([a.url, b.url]);

    const answers = [];
    for (const [i, status] of [200, 421, 202, 200, 404].entries()) {
      const res = await post(`${proxy.url}/status/${status}`, { 'x-test': `t${i}` }, `body ${i}`);
      expect(res.status).toBe(status);
      expect(res.echo).toBe(`t${i}`);
      answers.push(res.json);
    }
    expect(answers).toEqual(['a', 'b', 'a', 'b', 'a'].map((backend, i) => ({ backend, method: 'POST', body: `body ${i}` })));
    expect(proxy.byBackend()).toEqual([3, 2]);
    expect(proxy.byStatus()).toEqual({ 200: 2, 202: 1, 404: 1, 421: 1 });
    expect(proxy.answers.filter((x) => x.status === 421)).toEqual([{ backend: 1, method: 'POST', path: '/status/421', status: 421 }]);
  });

  it('passes a streamed answer on as it is written, and ends the upstream request when the client goes away', async () => {
    const backend = await startBackend('a');
    const proxy = await startRoundRobinProxy([backend.url]);
    const controller = new AbortController();
    const res = await fetch(`${proxy.url}/stream`, { signal: controller.signal });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const reader = res.body!.getReader();
    // The backend never ends this answer: its first chunk arrives only if it is not held back.
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toBe('data: from a\n\n');
    controller.abort();
    await until(() => backend.closedStreams === 1, 'the backend to see its stream closed', { timeoutMs: 5_000 });
    expect(proxy.byStatus()).toEqual({ 200: 1 });
  });

  it('answers 502 for a backend that cannot be reached, and counts it', async () => {
    const up = await startBackend('up');
    const proxy = await startRoundRobinProxy(['http://127.0.0.1:1', up.url]);
    expect((await fetch(`${proxy.url}/status/200`)).status).toBe(502);
    expect((await fetch(`${proxy.url}/status/200`)).status).toBe(200);
    expect(proxy.byStatus()).toEqual({ 200: 1, 502: 1 });
    expect(proxy.byBackend()).toEqual([1, 1]);
  });
});
