/**
 * Where webhooks may go: http(s) URLs without credentials, and, unless the deployment allows
 * private destinations, only public addresses, checked after DNS resolution. The sender
 * connects to the very addresses checked here (its `lookup`), so a name cannot resolve to a
 * public address for the check and a private one for the connection.
 */
import { promises as dns } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

export class WebhookAddressError extends Error {
  override readonly name = 'WebhookAddressError';
  constructor(
    readonly reason: 'scheme' | 'malformed' | 'credentials' | 'private',
    message: string,
  ) {
    super(message);
  }
}

export function parseWebhookUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new WebhookAddressError('malformed', 'the webhook URL does not parse');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new WebhookAddressError('scheme', 'a webhook URL is http or https');
  if (url.username !== '' || url.password !== '') throw new WebhookAddressError('credentials', 'a webhook URL may not carry credentials');
  return url;
}

const PRIVATE = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['224.0.0.0', 3],
] as const) PRIVATE.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [['::', 128], ['::1', 128], ['fe80::', 10], ['fc00::', 7], ['ff00::', 8]] as const) PRIVATE.addSubnet(net, bits, 'ipv6');

/** Whether an address is loopback, link-local, private or otherwise not for the public (unparseable: true). */
export function isPrivateAddress(ip: string): boolean {
  const family = isIP(ip);
  if (family === 4) return PRIVATE.check(ip, 'ipv4');
  if (family !== 6) return true;
  const lower = ip.toLowerCase();
  // IPv4-mapped and IPv4-compatible forms are judged by their IPv4 part.
  const embedded = /^(?:::ffff:|::)(\d+\.\d+\.\d+\.\d+)$/.exec(lower)?.[1];
  if (embedded !== undefined) return isPrivateAddress(embedded);
  const mappedHex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  if (mappedHex !== null) {
    const hi = parseInt(mappedHex[1]!, 16);
    const lo = parseInt(mappedHex[2]!, 16);
    return isPrivateAddress(`${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`);
  }
  return PRIVATE.check(ip, 'ipv6');
}

/** The host's addresses; throws WebhookAddressError('private') when one is private and that is not allowed. */
export async function resolvePublic(hostname: string, allowPrivate: boolean): Promise<{ address: string; family: 4 | 6 }[]> {
  const host = hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
  const literal = isIP(host);
  const addresses = literal !== 0
    ? [{ address: host, family: literal as 4 | 6 }]
    : (await dns.lookup(host, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family as 4 | 6 }));
  if (!allowPrivate && addresses.some((a) => isPrivateAddress(a.address))) {
    throw new WebhookAddressError('private', 'the webhook URL names a loopback, link-local or private address');
  }
  return addresses;
}

/** A `lookup` for http.request that resolves through resolvePublic (the connection goes to a checked address). */
export function guardedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    resolvePublic(hostname, allowPrivate).then(
      (addresses) => {
        if (options.all === true) (callback as unknown as (e: null, a: typeof addresses) => void)(null, addresses);
        else callback(null, addresses[0]!.address, addresses[0]!.family);
      },
      (error: NodeJS.ErrnoException) => callback(error, '', 0),
    );
  };
}
