/**
 * What one process lets clients hold, over real HTTP: open connections are capped (a
 * connection beyond the cap is closed at once and the log says so), and a client that streams
 * a body over the size limit reads the 413 instead of a reset (EPIPE) while it is still sending.
 */
import { request } from 'node:http';
import { describe, expect, it } from 'vitest';
import { startServer } from '../fixtures/server-process.js';
import { rawRequest } from '../fixtures/raw-http.js';
import { until } from '../fixtures/until.js';

/** GET /healthz on a fresh connection: its status, or the error code of a connection closed under it. */
function health(url: string): Promise<number | string> {
  return new Promise((resolve) => {
    const req = request(new URL('/healthz', url), { agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
    req.end();
  });
}

/**
 * POSTs a JSON body of `bytes` bytes in 64 KiB writes, with a Content-Length or chunked, and
 * resolves with the answer's status and code, or the error that ended the exchange.
 */
function streamBody(url: string, bytes: number, withLength: boolean): Promise<string> {
  return new Promise((resolve) => {
    const prefix = '{"instructions":"';
    const req = request(new URL('/v1/agents', url), {
      method: 'POST',
      agent: false,
      headers: { 'content-type': 'application/json', ...(withLength ? { 'content-length': String(prefix.length + bytes) } : {}) },
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve(`${res.statusCode} ${(JSON.parse(body) as { code: string }).code}`));
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve(`error ${error.code ?? error.message}`));
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    let sent = 0;
    const write = (): void => {
      while (sent < bytes) {
        const part = sent + chunk.length <= bytes ? chunk : chunk.subarray(0, bytes - sent);
        sent += part.length;
        if (!req.write(part)) {
          req.once('drain', write);
          return;
        }
      }
      req.end();
    };
    req.write(prefix);
    write();
  });
}

describe('connections', { timeout: 60_000 }, () => {
  it('closes a connection beyond AGENTFOREST_MAX_CONNECTIONS at once, says so in the log, and takes one again when another closes', async () => {
    const server = await startServer({ dataPath: ':memory:', env: { AGENTFOREST_MAX_CONNECTIONS: '3' } });
    const held = [];
    for (let i = 0; i < 3; i++) held.push(await rawRequest(server.url, ''));
    expect(await health(server.url)).toBe('ECONNRESET');
    await server.waitForLog('the cap in the log', (l) => l.json?.msg === 'a connection was closed at once: 3 connections are open (AGENTFOREST_MAX_CONNECTIONS)');

    held[0]!.destroy();
    await until(async () => (await health(server.url)) === 200, 'a connection to be taken again', { timeoutMs: 5_000 });
  });

  it('answers a body streamed over the limit with 413, read to its end rather than reset under the client', async () => {
    const server = await startServer({ dataPath: ':memory:', env: { AGENTFOREST_BODY_LIMIT: String(1024 * 1024) } });
    const answers: string[] = [];
    for (let i = 0; i < 10; i++) answers.push(await streamBody(server.url, 8 * 1024 * 1024, i % 2 === 0));
    expect(answers).toEqual(Array.from({ length: 10 }, () => '413 PAYLOAD_TOO_LARGE'));
    // The server still serves.
    expect(await health(server.url)).toBe(200);
  });
});
