/**
 * A tenant's MCP tool server is reached at public addresses only: only an admin may point the
 * service at its own network. The webhooks' address guard (observation/webhooks/address-guard.ts)
 * is applied at registration, and on every connection the server's transport opens: the
 * connection resolves its host through the guard's lookup, so the address checked is the one
 * connected to (a name cannot resolve to a public address for the check and a private one for
 * the connection), and an IP literal host, which is connected to without a lookup, is checked
 * before each request.
 */
import { isIP } from 'node:net';
import { Agent, fetch as undiciFetch } from 'undici';
import { ServiceError } from '../../domain/errors.js';
import { guardedLookup, resolvePublic, WebhookAddressError } from '../../observation/webhooks/address-guard.js';

const REFUSED = "a tenant's tool server must be at a public address (not loopback, private or link-local)";

/** Registration: 400 VALIDATION unless every address the URL's host resolves to now is public. */
export async function checkPublicUrl(url: string): Promise<void> {
  const host = new URL(url).hostname;
  try {
    await resolvePublic(host, false);
  } catch (error) {
    if (error instanceof WebhookAddressError) throw new ServiceError('VALIDATION', `url: ${REFUSED}; "${host}" is not`);
    // A name that does not resolve now may later, to anything: refuse it rather than guess.
    throw new ServiceError('VALIDATION', `url: the host "${host}" does not resolve, so it cannot be checked to be public`);
  }
}

/** A fetch whose connections pass the address guard, and the pool of connections it keeps. */
export interface GuardedFetch {
  fetch: typeof fetch;
  close(): Promise<void>;
}

/** Connections to public addresses only (`allowPrivate`: any address, through the same path; tests only). */
export function guardedFetch(allowPrivate: boolean): GuardedFetch {
  // Its own pool: a connection in it was opened under this policy, never another's.
  const dispatcher = new Agent({ connect: { lookup: guardedLookup(allowPrivate) } });
  const guarded = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const host = hostOf(input);
    try {
      if (isIP(host) !== 0) await resolvePublic(host, allowPrivate);
      // undici's own fetch, for its dispatcher option; its Request and Response are the global ones' twins.
      return (await undiciFetch(input as Parameters<typeof undiciFetch>[0], { ...(init as Parameters<typeof undiciFetch>[1]), dispatcher })) as unknown as Response;
    } catch (error) {
      if (error instanceof WebhookAddressError || (error as { cause?: unknown }).cause instanceof WebhookAddressError) throw new Error(`refused: ${REFUSED}`);
      throw error;
    }
  };
  return { fetch: guarded as typeof fetch, close: () => dispatcher.destroy() };
}

function hostOf(input: string | URL | Request): string {
  const url = input instanceof URL ? input : new URL(typeof input === 'string' ? input : input.url);
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
}
