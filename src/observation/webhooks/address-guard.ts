/**
 * The address guard: a webhook goes only to an http(s) URL without credentials, and, unless
 * private destinations are allowed, only to public addresses: globally reachable ones, by the
 * IANA special-purpose registries. Otherwise a webhook URL would let whoever registers it reach
 * the service's own network (loopback, link-local metadata endpoints, RFC 1918 ranges, or a
 * documentation range a container's network is numbered in).
 *
 * The check is made on the addresses the connection will use: `guardedLookup` is the resolver
 * handed to the HTTP client, so the address that is checked is the one that is connected to,
 * and a name cannot resolve to a public address for the check and a private one for the
 * connection. IPv6 forms that embed an IPv4 address (mapped, compatible, NAT64, 6to4) are
 * judged by that IPv4 address.
 */
import { promises as dns, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/** Why a webhook destination is refused. */
export type WebhookAddressReason = 'scheme' | 'malformed' | 'credentials' | 'private';

/** A webhook destination that is refused; the message never contains the URL's credentials. */
export class WebhookAddressError extends Error {
  override readonly name = 'WebhookAddressError';

  constructor(
    readonly reason: WebhookAddressReason,
    message: string,
  ) {
    super(message);
  }
}

/** One address a destination resolves to. */
export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/*
 * What is not a webhook's (or a tenant's tool server's) to reach: every range the IANA
 * special-purpose address registries (iana.org/assignments/iana-ipv4-special-registry and
 * iana-ipv6-special-registry) mark as not globally reachable, and multicast. A block that holds
 * a few globally reachable anycast services among local ones (192.0.0.0/24, 2001::/23: PCP,
 * TURN, AMT, AS112, ORCHIDv2, DRIP) is refused whole: none of them receives webhooks. The
 * documentation ranges are no exception: nothing public answers there, so whatever does is a
 * network of the host's own (a container's bridge may be numbered in 192.0.2.0/24).
 */
const PRIVATE_IPV4: [string, number][] = [
  // "This network" (RFC 791), private use (RFC 1918), shared address space (RFC 6598), loopback, link-local.
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  // IETF protocol assignments (RFC 6890): DS-Lite, the dummy address, NAT64 discovery...
  ['192.0.0.0', 24],
  // Documentation: TEST-NET-1, -2 and -3 (RFC 5737).
  ['192.0.2.0', 24],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  // The 6to4 relay anycast, deprecated (RFC 7526): a relay there, if any, is one a local network runs.
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  // Benchmarking (RFC 2544).
  ['198.18.0.0', 15],
  // Multicast (224/4), reserved (240/4, RFC 1112) and the limited broadcast address.
  ['224.0.0.0', 3],
];

/** Beside these, an IPv6 address that carries an IPv4 one is judged by it (`embeddedIpv4`). */
const PRIVATE_IPV6: [string, number][] = [
  // Unspecified and loopback.
  ['::', 128],
  ['::1', 128],
  // IPv4/IPv6 translation for local use (RFC 8215).
  ['64:ff9b:1::', 48],
  // Discard-only (RFC 6666) and the dummy prefix (RFC 9780).
  ['100::', 64],
  ['100:0:0:1::', 64],
  // IETF protocol assignments (RFC 2928): Teredo, benchmarking (2001:2::/48), ORCHID...
  ['2001::', 23],
  // Documentation (RFC 3849, RFC 9637).
  ['2001:db8::', 32],
  ['3fff::', 20],
  // Segment routing SIDs (RFC 9602).
  ['5f00::', 16],
  // Unique local (RFC 4193), and the deprecated site-local addresses they replaced.
  ['fc00::', 7],
  ['fec0::', 10],
  ['fe80::', 10],
  ['ff00::', 8],
];

const privateV4 = blockList(PRIVATE_IPV4, 'ipv4');
const privateV6 = blockList(PRIVATE_IPV6, 'ipv6');

function blockList(subnets: [string, number][], type: 'ipv4' | 'ipv6'): BlockList {
  const list = new BlockList();
  for (const [network, prefix] of subnets) list.addSubnet(network, prefix, type);
  return list;
}

/**
 * The URL a webhook is sent to: throws a WebhookAddressError unless `raw` parses as an
 * `http:` or `https:` URL without a username or password.
 */
export function parseWebhookUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new WebhookAddressError('malformed', 'the webhook URL does not parse as a URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new WebhookAddressError('scheme', `a webhook URL is http: or https:, not ${url.protocol}`);
  }
  if (url.username !== '' || url.password !== '') {
    throw new WebhookAddressError('credentials', `the webhook URL for ${url.protocol}//${url.host} may not carry credentials`);
  }
  if (url.hostname === '') throw new WebhookAddressError('malformed', 'the webhook URL has no host');
  return url;
}

/**
 * Whether `ip` is an address a webhook may not go to by default: any that is not globally
 * reachable (loopback, private, link-local, shared, documentation, benchmarking, discard,
 * reserved; see PRIVATE_IPV4) or multicast. Anything that is not an IP address is refused too.
 */
export function isPrivateAddress(ip: string): boolean {
  const family = isIP(ip);
  if (family === 4) return privateV4.check(ip, 'ipv4');
  if (family !== 6) return true;
  const address = withoutZone(ip);
  const embedded = embeddedIpv4(ipv6Groups(address));
  if (embedded !== undefined) return privateV4.check(embedded, 'ipv4');
  return privateV6.check(address, 'ipv6');
}

/**
 * The addresses `hostname` (a name or an IP literal, IPv6 in brackets or not) resolves to.
 * Unless `allowPrivate`, rejects with a WebhookAddressError('private') when any of them is
 * private; a name that does not resolve rejects with the resolver's error.
 */
export async function resolvePublic(hostname: string, allowPrivate: boolean): Promise<ResolvedAddress[]> {
  const host = hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
  const literal = isIP(host);
  const addresses: ResolvedAddress[] =
    literal === 4 || literal === 6
      ? [{ address: host, family: literal }]
      : (await dns.lookup(host, { all: true, verbatim: true })).map(toResolved);
  if (addresses.length === 0) throw new WebhookAddressError('malformed', 'the webhook host resolves to no address');
  if (!allowPrivate && addresses.some((a) => isPrivateAddress(a.address))) {
    throw new WebhookAddressError('private', 'the webhook host resolves to a private address');
  }
  return addresses;
}

/**
 * A `lookup` for `http.request` that resolves through resolvePublic, so the connection goes
 * only to an address that passed the check; a refused host calls back with the
 * WebhookAddressError.
 */
export function guardedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    resolvePublic(hostname, allowPrivate).then(
      (resolved) => {
        const wanted = familyNumber(options.family);
        const addresses = wanted === 0 ? resolved : resolved.filter((a) => a.family === wanted);
        const first = addresses[0];
        if (first === undefined) {
          callback(new WebhookAddressError('malformed', `the webhook host has no IPv${wanted} address`), '');
        } else if (options.all === true) {
          callback(null, addresses.map((a): LookupAddress => ({ address: a.address, family: a.family })));
        } else {
          callback(null, first.address, first.family);
        }
      },
      (error: Error) => callback(error, ''),
    );
  };
}

function familyNumber(family: number | string | undefined): 0 | 4 | 6 {
  if (family === 4 || family === 'IPv4') return 4;
  if (family === 6 || family === 'IPv6') return 6;
  return 0;
}

function toResolved(entry: LookupAddress): ResolvedAddress {
  return { address: entry.address, family: entry.family === 6 ? 6 : 4 };
}

function withoutZone(ip: string): string {
  const zone = ip.indexOf('%');
  return zone === -1 ? ip : ip.slice(0, zone);
}

/** The eight 16-bit groups of a valid IPv6 address (no zone). */
function ipv6Groups(address: string): number[] {
  const lastColon = address.lastIndexOf(':');
  let text = address;
  if (address.includes('.', lastColon)) {
    const [a = 0, b = 0, c = 0, d = 0] = address.slice(lastColon + 1).split('.').map(Number);
    text = `${address.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const parse = (part: string): number[] => (part === '' ? [] : part.split(':').map((g) => parseInt(g, 16)));
  const gap = text.indexOf('::');
  if (gap === -1) return parse(text);
  const head = parse(text.slice(0, gap));
  const rest = parse(text.slice(gap + 2));
  return [...head, ...new Array<number>(8 - head.length - rest.length).fill(0), ...rest];
}

/**
 * The IPv4 address an IPv4-mapped, IPv4-compatible or NAT64 (64:ff9b::/96) address carries, or
 * a 6to4 one (2002::/16, RFC 3056: a route to it is a tunnel to that IPv4 address).
 */
function embeddedIpv4(groups: number[]): string | undefined {
  const [g0, g1 = 0, g2 = 0, g3, g4, g5, g6 = 0, g7 = 0] = groups;
  if (g0 === 0x2002) return [g1 >> 8, g1 & 0xff, g2 >> 8, g2 & 0xff].join('.');
  const zeroMiddle = g2 === 0 && g3 === 0 && g4 === 0;
  const mapped = g0 === 0 && g1 === 0 && zeroMiddle && g5 === 0xffff;
  const compatible = g0 === 0 && g1 === 0 && zeroMiddle && g5 === 0;
  const nat64 = g0 === 0x64 && g1 === 0xff9b && zeroMiddle && g5 === 0;
  if (!mapped && !compatible && !nat64) return undefined;
  return [g6 >> 8, g6 & 0xff, g7 >> 8, g7 & 0xff].join('.');
}
