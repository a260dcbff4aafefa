/**
 * The incarnation lifecycle as a table: every phase against every transition, and the rules
 * it keeps against the turn phase.
 */
import { describe, expect, it } from 'vitest';
import { checkLifecycle } from '../../src/domain/invariants.js';
import {
  beginLeaving,
  hasSettled,
  isLeaving,
  left,
  queueSettle,
  RESIDENT,
  settleCheckRuns,
  turnAdmitted,
  type Lifecycle,
} from '../../src/domain/lifecycle.js';

const PHASES: Record<string, Lifecycle> = {
  resident: RESIDENT,
  'resident, ran a turn': { phase: 'resident', ranATurn: true, settleQueued: false },
  'resident, settle queued': { phase: 'resident', ranATurn: true, settleQueued: true },
  settling: { phase: 'settling', ranATurn: true },
  closing: { phase: 'closing', ranATurn: false },
  settled: { phase: 'settled', ranATurn: true },
  closed: { phase: 'closed', ranATurn: false },
};

const describeLifecycle = (l: Lifecycle): string =>
  l.phase === 'resident' ? `resident${l.ranATurn ? ' ran' : ''}${l.settleQueued ? ' queued' : ''}` : `${l.phase}${l.ranATurn ? ' ran' : ''}`;

const TRANSITIONS: Record<string, (l: Lifecycle) => Lifecycle> = {
  turnAdmitted,
  queueSettle,
  settleCheckRuns,
  'beginLeaving settle': (l) => beginLeaving(l, 'settle'),
  'beginLeaving close': (l) => beginLeaving(l, 'close'),
  left,
};

const TABLE: Record<string, Record<string, string>> = {
  resident: { turnAdmitted: 'resident ran', queueSettle: 'resident queued', settleCheckRuns: 'resident', 'beginLeaving settle': 'settling', 'beginLeaving close': 'closing', left: 'closed' },
  'resident, ran a turn': { turnAdmitted: 'resident ran', queueSettle: 'resident ran queued', settleCheckRuns: 'resident ran', 'beginLeaving settle': 'settling ran', 'beginLeaving close': 'closing ran', left: 'closed ran' },
  'resident, settle queued': { turnAdmitted: 'resident ran queued', queueSettle: 'resident ran queued', settleCheckRuns: 'resident ran', 'beginLeaving settle': 'settling ran', 'beginLeaving close': 'closing ran', left: 'closed ran' },
  settling: { turnAdmitted: 'settling ran', queueSettle: 'settling ran', settleCheckRuns: 'settling ran', 'beginLeaving settle': 'settling ran', 'beginLeaving close': 'settling ran', left: 'settled ran' },
  closing: { turnAdmitted: 'closing', queueSettle: 'closing', settleCheckRuns: 'closing', 'beginLeaving settle': 'closing', 'beginLeaving close': 'closing', left: 'closed' },
  settled: { turnAdmitted: 'settled ran', queueSettle: 'settled ran', settleCheckRuns: 'settled ran', 'beginLeaving settle': 'settled ran', 'beginLeaving close': 'settled ran', left: 'settled ran' },
  closed: { turnAdmitted: 'closed', queueSettle: 'closed', settleCheckRuns: 'closed', 'beginLeaving settle': 'closed', 'beginLeaving close': 'closed', left: 'closed' },
};

const CELLS = Object.keys(PHASES).flatMap((phase) => Object.keys(TRANSITIONS).map((transition) => ({ phase, transition })));

describe('incarnation lifecycle', () => {
  it.each(CELLS)('$transition from "$phase" has the tabled outcome', ({ phase, transition }) => {
    const before = PHASES[phase]!;
    const after = TRANSITIONS[transition]!(before);
    expect(describeLifecycle(after)).toBe(TABLE[phase]![transition]);
    // A transition that changes nothing hands back the same value, so callers can tell.
    if (describeLifecycle(after) === describeLifecycle(before)) expect(after).toBe(before);
  });

  it('only a resident incarnation admits work; only a settled one counts as settled', () => {
    expect(Object.entries(PHASES).filter(([, l]) => !isLeaving(l)).map(([name]) => name)).toEqual(['resident', 'resident, ran a turn', 'resident, settle queued']);
    expect(Object.entries(PHASES).filter(([, l]) => hasSettled(l)).map(([name]) => name)).toEqual(['settled']);
  });

  it('an incarnation that left has a disposed turn state, and a disposed one is past the cutoff', () => {
    expect(checkLifecycle({ phase: 'settled', ranATurn: true }, 'idle')).toEqual(['an incarnation that left the registry has a disposed turn state']);
    expect(checkLifecycle(RESIDENT, 'disposed')).toEqual(['a disposed turn state is past the disposal cutoff']);
    expect(checkLifecycle({ phase: 'closed', ranATurn: false }, 'disposed')).toEqual([]);
    expect(checkLifecycle({ phase: 'closing', ranATurn: false }, 'running')).toEqual([]);
  });
});
