/**
 * Production ids: a kind prefix and a UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then a
 * 12-bit counter (the "monotonic random" of RFC 9562 §6.2, method 1) and 62 random bits.
 *
 * Time order is what keeps the store fast: message ids are indexed, and random keys scatter
 * every insert over a different B-tree page (each dirty page is written to the WAL), while
 * time-ordered keys append to the same few pages. Ids from one process are strictly
 * increasing as strings; the random bits keep them unique across processes.
 */
import { randomFillSync } from 'node:crypto';
import type { IdKind, IdSource } from '../domain/ports.js';

const ID_PREFIX: Record<IdKind, string> = {
  agent: 'agt',
  message: 'msg',
  inbox: 'inb',
  turn: 'turn',
  step: 'step',
  activation: 'act',
  webhook: 'wh',
};

/** Character codes of the 16 hex digits. */
const HEX = Array.from({ length: 16 }, (_, i) => i.toString(16).charCodeAt(0));
const DASH = '-'.charCodeAt(0);
const UUID_LENGTH = 36;

/**
 * Writes UUIDv7s as character codes into `out` from `at`, strictly increasing within this
 * writer, even within one millisecond. An id is then made with one `String.fromCharCode`: a
 * flat string in one allocation, where joining its pieces made about twenty intermediate
 * strings per id, for the garbage collector, and a copy once it was first used as a key.
 */
function uuidV7Writer(now: () => number): (out: number[], at: number) => void {
  const pool = Buffer.alloc(4096);
  let poolAt = pool.length;
  let lastMs = -1;
  let counter = 0;
  /** The millisecond whose 12 hex digits `timeDigits` holds (they change once per millisecond). */
  let digitsMs = -1;
  const timeDigits: number[] = new Array<number>(12).fill(0);
  const hexByte = (out: number[], at: number, byte: number): void => {
    out[at] = HEX[byte >>> 4]!;
    out[at + 1] = HEX[byte & 0xf]!;
  };
  return (out, at) => {
    let ms = now();
    if (ms > lastMs) {
      lastMs = ms;
      counter = 0;
    } else {
      // Same (or an earlier) millisecond: count up, borrowing the next millisecond on overflow.
      counter++;
      if (counter > 0xfff) {
        lastMs++;
        counter = 0;
      }
      ms = lastMs;
    }
    if (ms !== digitsMs) {
      digitsMs = ms;
      const high = Math.floor(ms / 2 ** 16);
      const low = ms % 2 ** 16;
      for (let i = 0; i < 8; i++) timeDigits[i] = HEX[(high >>> (28 - 4 * i)) & 0xf]!;
      for (let i = 0; i < 4; i++) timeDigits[8 + i] = HEX[(low >>> (12 - 4 * i)) & 0xf]!;
    }
    if (poolAt + 8 > pool.length) {
      randomFillSync(pool);
      poolAt = 0;
    }
    // xxxxxxxx-xxxx-7ccc-vrrr-rrrrrrrrrrrr: time, version 7 and counter, variant 10 and random.
    for (let i = 0; i < 8; i++) out[at + i] = timeDigits[i]!;
    out[at + 8] = DASH;
    for (let i = 0; i < 4; i++) out[at + 9 + i] = timeDigits[8 + i]!;
    out[at + 13] = DASH;
    out[at + 14] = HEX[7]!;
    out[at + 15] = HEX[counter >>> 8]!;
    hexByte(out, at + 16, counter & 0xff);
    out[at + 18] = DASH;
    hexByte(out, at + 19, 0x80 | (pool[poolAt++]! & 0x3f));
    hexByte(out, at + 21, pool[poolAt++]!);
    out[at + 23] = DASH;
    for (let i = 0; i < 6; i++) hexByte(out, at + 24 + 2 * i, pool[poolAt++]!);
  };
}

/** A UUIDv7 source: strictly increasing within this source, even within one millisecond. */
export function uuidV7Source(now: () => number = Date.now): () => string {
  const write = uuidV7Writer(now);
  const codes: number[] = new Array<number>(UUID_LENGTH).fill(0);
  return () => {
    write(codes, 0);
    return String.fromCharCode.apply(null, codes);
  };
}

/** Production ids: `<prefix>_<uuidv7>`, e.g. `msg_0190c3b2-8f1e-7000-9a4b-3c2d1e0f5a6b`. */
export function timeOrderedIds(now: () => number = Date.now): IdSource {
  const write = uuidV7Writer(now);
  // Per kind, the codes of `<prefix>_` followed by room for the UUID.
  const codes = new Map<IdKind, number[]>();
  for (const [kind, prefix] of Object.entries(ID_PREFIX) as [IdKind, string][]) {
    codes.set(kind, [...`${prefix}_`].map((c) => c.charCodeAt(0)).concat(new Array<number>(UUID_LENGTH).fill(0)));
  }
  return {
    next: (kind) => {
      const out = codes.get(kind)!;
      write(out, out.length - UUID_LENGTH);
      return String.fromCharCode.apply(null, out);
    },
  };
}
