import type { LookupAddress } from 'node:dns';
import { describe, expect, it } from 'vitest';
import {
  guardedLookup,
  isPrivateAddress,
  parseWebhookUrl,
  resolvePublic,
  WebhookAddressError,
} from '../../../src/observation/webhooks/address-guard.js';

function refusal(run: () => unknown): WebhookAddressError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(WebhookAddressError);
    return error as WebhookAddressError;
  }
  throw new Error('expected a refusal');
}

const PUBLIC = [
  '8.8.8.8',
  '1.1.1.1',
  '100.63.255.255',
  '100.128.0.0',
  '172.15.255.255',
  '172.32.0.0',
  '192.0.1.1',
  '198.17.255.255',
  '198.20.0.0',
  '223.255.255.255',
  '2606:4700::1111',
  '2001:4860:4860::8888',
  '::ffff:8.8.8.8',
  '::ffff:808:808',
  '64:ff9b::808:808',
  // Just outside the ranges of NOT_GLOBAL.
  '192.0.3.0',
  '192.88.100.0',
  '198.51.99.255',
  '198.51.101.0',
  '203.0.112.255',
  '203.0.114.0',
  '64:ff9b:2::1',
  '100:0:0:2::1',
  '2001:200::1',
  '2001:db7:ffff::1',
  '2001:db9::1',
  '3fef:ffff::1',
  '3fff:1000::1',
  '5eff:ffff::1',
  '2002:808:808::1',
];

const PRIVATE = [
  '0.0.0.0',
  '0.255.255.255',
  '10.0.0.1',
  '10.255.255.255',
  '100.64.0.1',
  '100.127.255.255',
  '127.0.0.1',
  '127.255.255.254',
  '169.254.169.254',
  '172.16.0.1',
  '172.31.255.255',
  '192.168.0.1',
  '192.168.255.255',
  '192.0.0.8',
  '198.18.0.1',
  '198.19.255.255',
  '224.0.0.1',
  '239.255.255.250',
  '240.0.0.1',
  '255.255.255.255',
  '::',
  '::1',
  '0:0:0:0:0:0:0:1',
  'fe80::1',
  'fe80::1%eth0',
  'febf:ffff::1',
  'fc00::1',
  'fd12:3456:789a::1',
  'ff02::1',
  '::ffff:127.0.0.1',
  '::ffff:7f00:1',
  '0:0:0:0:0:ffff:10.1.2.3',
  '::127.0.0.1',
  '::ffff:169.254.169.254',
  '64:ff9b::127.0.0.1',
];

/**
 * What the IANA special-purpose registries mark as not globally reachable, beyond the private
 * and loopback ranges: documentation, benchmarking, discard, translation for local use, and
 * IPv6 forms carrying such an IPv4 address. Nothing public answers there, so whatever does is
 * the host's own network (this container's eth0 is in 192.0.2.0/24).
 */
const NOT_GLOBAL = [
  '192.0.2.1',
  '192.0.2.255',
  '198.51.100.7',
  '203.0.113.200',
  '192.88.99.1',
  '::ffff:192.0.2.2',
  '64:ff9b::c000:202',
  '2001:db8::1',
  '2001:db8:ffff:ffff:ffff:ffff:ffff:ffff',
  '3fff::1',
  '3fff:fff::1',
  '100::1',
  '100::ffff:ffff:ffff:ffff',
  '100:0:0:1::1',
  '64:ff9b:1::a00:1',
  '2001::1',
  '2001:2::1',
  '2001:10::1',
  '2001:1ff:ffff::1',
  '5f00::1',
  '2002:7f00:1::1',
  '2002:c000:202::1',
  '2002:a00:1::',
];

const UNPARSEABLE = ['', 'localhost', '127.1', '0x7f000001', '1.2.3.4.5', '256.1.1.1', '[::1]', '::ffff:1.2.3', 'fe80::g'];

describe('isPrivateAddress', () => {
  it.each(PUBLIC)('lets the public address %s through', (ip) => {
    expect(isPrivateAddress(ip)).toBe(false);
  });

  it.each(PRIVATE)('refuses %s', (ip) => {
    expect(isPrivateAddress(ip)).toBe(true);
  });

  it.each(NOT_GLOBAL)('refuses %s, which is not globally reachable', (ip) => {
    expect(isPrivateAddress(ip)).toBe(true);
  });

  it.each(UNPARSEABLE)('refuses %j, which is no IP address', (ip) => {
    expect(isPrivateAddress(ip)).toBe(true);
  });
});

describe('parseWebhookUrl', () => {
  it('takes http and https URLs', () => {
    expect(parseWebhookUrl('https://hooks.example.com/in?x=1').href).toBe('https://hooks.example.com/in?x=1');
    expect(parseWebhookUrl('http://127.0.0.1:8080/').port).toBe('8080');
  });

  it.each(['ftp://example.com/file', 'file:///etc/passwd', 'javascript:alert(1)', 'data:text/plain,hi', 'ws://example.com/'])(
    'refuses the scheme of %s',
    (raw) => {
      expect(refusal(() => parseWebhookUrl(raw)).reason).toBe('scheme');
    },
  );

  it.each(['', 'not a url', '/relative/path', 'http://'])('refuses %j as malformed', (raw) => {
    expect(refusal(() => parseWebhookUrl(raw)).reason).toBe('malformed');
  });

  it('refuses credentials without repeating them', () => {
    const withPassword = refusal(() => parseWebhookUrl('https://alice:s3cr3t-pa55@hooks.example.com/in'));
    expect(withPassword.reason).toBe('credentials');
    expect(withPassword.message).not.toContain('s3cr3t-pa55');
    expect(withPassword.message).not.toContain('alice');
    const userOnly = refusal(() => parseWebhookUrl('https://tokenuser@hooks.example.com/in'));
    expect(userOnly.reason).toBe('credentials');
    expect(userOnly.message).not.toContain('tokenuser');
  });
});

describe('resolvePublic', () => {
  it('refuses localhost, whatever it resolves to', async () => {
    await expect(resolvePublic('localhost', false)).rejects.toMatchObject({ name: 'WebhookAddressError', reason: 'private' });
  });

  it('checks IP literals without a lookup, IPv6 with or without brackets', async () => {
    await expect(resolvePublic('127.0.0.1', false)).rejects.toMatchObject({ reason: 'private' });
    await expect(resolvePublic('[::1]', false)).rejects.toMatchObject({ reason: 'private' });
    await expect(resolvePublic('8.8.8.8', false)).resolves.toEqual([{ address: '8.8.8.8', family: 4 }]);
    await expect(resolvePublic('[2606:4700::1111]', false)).resolves.toEqual([{ address: '2606:4700::1111', family: 6 }]);
  });

  it('lets private addresses through when they are allowed', async () => {
    await expect(resolvePublic('127.0.0.1', true)).resolves.toEqual([{ address: '127.0.0.1', family: 4 }]);
    const local = await resolvePublic('localhost', true);
    expect(local.length).toBeGreaterThan(0);
    for (const { address } of local) expect(isPrivateAddress(address)).toBe(true);
  });
});

describe('guardedLookup', () => {
  type Result = { error: NodeJS.ErrnoException | null; address: string | LookupAddress[]; family: number | undefined };
  const lookup = (allowPrivate: boolean, hostname: string, all: boolean): Promise<Result> =>
    new Promise((resolve) => {
      guardedLookup(allowPrivate)(hostname, { all }, (error, address, family) => resolve({ error, address, family }));
    });

  it('answers with one address or all of them, as asked', async () => {
    expect(await lookup(true, '127.0.0.1', false)).toEqual({ error: null, address: '127.0.0.1', family: 4 });
    expect(await lookup(true, '127.0.0.1', true)).toEqual({ error: null, address: [{ address: '127.0.0.1', family: 4 }], family: undefined });
  });

  it('calls back with the refusal for a private host', async () => {
    for (const all of [false, true]) {
      const { error } = await lookup(false, 'localhost', all);
      expect(error).toBeInstanceOf(WebhookAddressError);
      expect((error as WebhookAddressError).reason).toBe('private');
    }
  });

  it('keeps to the family asked for', async () => {
    const result = await new Promise<Result>((resolve) => {
      guardedLookup(true)('127.0.0.1', { family: 6 }, (error, address, family) => resolve({ error, address, family }));
    });
    expect(result.error).toBeInstanceOf(WebhookAddressError);
  });
});
