/**
 * One webhook request: a POST with a whole-request timeout, to a checked address (see
 * address-guard.ts), never following a redirect, reading at most `maxResponseBytes` of the
 * answer. It never rejects: every failure is an outcome, with a message that holds no header.
 */
import http from 'node:http';
import https from 'node:https';
import { guardedLookup, resolvePublic, WebhookAddressError } from './address-guard.js';
import { isIP } from 'node:net';

export interface WebhookRequest {
  url: URL;
  headers: Record<string, string>;
  body: string;
  timeoutMs: number;
  maxResponseBytes: number;
  allowPrivate: boolean;
}

export type SendOutcome =
  | { kind: 'response'; status: number; retryAfter: string | undefined; body: string }
  | { kind: 'error'; reason: 'timeout' | 'network' | 'address'; message: string };

export async function sendWebhook(request: WebhookRequest): Promise<SendOutcome> {
  const host = request.url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host) !== 0) {
    // Node does not call `lookup` for an address literal: check it here.
    try {
      await resolvePublic(host, request.allowPrivate);
    } catch (error) {
      return { kind: 'error', reason: 'address', message: error instanceof Error ? error.message : 'refused address' };
    }
  }
  return new Promise((resolve) => {
    let settled = false;
    const finish = (outcome: SendOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(outcome);
    };
    const body = Buffer.from(request.body);
    const transport = request.url.protocol === 'https:' ? https : http;
    const req = transport.request(request.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'user-agent': 'agentforest-webhooks', ...request.headers, 'content-length': String(body.length) },
      lookup: guardedLookup(request.allowPrivate),
      agent: false,
    });
    const timer = setTimeout(() => {
      finish({ kind: 'error', reason: 'timeout', message: `timed out after ${request.timeoutMs} ms` });
      req.destroy();
    }, request.timeoutMs);
    req.on('error', (error: Error & { code?: string }) => {
      if (error instanceof WebhookAddressError) finish({ kind: 'error', reason: 'address', message: error.message });
      else finish({ kind: 'error', reason: 'network', message: error.code === undefined ? error.message : `${error.code}: ${error.message}` });
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const done = (): void => {
        const retryAfter = res.headers['retry-after'];
        finish({ kind: 'response', status: res.statusCode ?? 0, retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter, body: Buffer.concat(chunks).subarray(0, request.maxResponseBytes).toString('utf8') });
      };
      res.on('data', (chunk: Buffer) => {
        if (size >= request.maxResponseBytes) return;
        chunks.push(chunk);
        size += chunk.length;
        if (size >= request.maxResponseBytes) {
          done();
          res.destroy();
          req.destroy();
        }
      });
      res.on('end', done);
      res.on('error', done);
      res.on('aborted', done);
    });
    req.end(body);
  });
}
