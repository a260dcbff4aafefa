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
};

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** A UUIDv7 source: strictly increasing within this source, even within one millisecond. */
export function uuidV7Source(now: () => number = Date.now): () => string {
  const pool = Buffer.alloc(4096);
  let poolAt = pool.length;
  let lastMs = -1;
  let counter = 0;
  const bytes = new Uint8Array(16);
  return () => {
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
    if (poolAt + 8 > pool.length) {
      randomFillSync(pool);
      poolAt = 0;
    }
    const high = Math.floor(ms / 2 ** 16);
    const low = ms % 2 ** 16;
    bytes[0] = (high >>> 24) & 0xff;
    bytes[1] = (high >>> 16) & 0xff;
    bytes[2] = (high >>> 8) & 0xff;
    bytes[3] = high & 0xff;
    bytes[4] = (low >>> 8) & 0xff;
    bytes[5] = low & 0xff;
    bytes[6] = 0x70 | (counter >>> 8);
    bytes[7] = counter & 0xff;
    for (let i = 8; i < 16; i++) bytes[i] = pool[poolAt++]!;
    bytes[8] = 0x80 | (bytes[8]! & 0x3f);
    let out = '';
    for (let i = 0; i < 16; i++) {
      if (i === 4 || i === 6 || i === 8 || i === 10) out += '-';
      out += HEX[bytes[i]!];
    }
    return out;
  };
}

/** Production ids: `<prefix>_<uuidv7>`, e.g. `msg_0190c3b2-8f1e-7000-9a4b-3c2d1e0f5a6b`. */
export function timeOrderedIds(now?: () => number): IdSource {
  const next = uuidV7Source(now);
  return { next: (kind) => `${ID_PREFIX[kind]}_${next()}` };
}
