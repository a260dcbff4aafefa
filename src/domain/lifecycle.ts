/**
 * The lifecycle of one live incarnation: a root, a one-shot or remote child, or a continuable
 * child with its Activation. It is one value per incarnation, moved only by the transition
 * functions below; every question the runtime asks about leaving (is it being disposed, did it
 * settle, is a settlement check queued, did it ever run a turn) is derived from it.
 *
 * Phases:
 * - `resident`: live and admitting work. `settleQueued`: a settlement check is scheduled
 *   (a continuable child that looked quiescent); it is still fully resident meanwhile.
 * - `settling`: the disposal cutoff is set, and the incarnation leaves by settling (a
 *   quiescent continuable child without live children: cold-resumable later).
 * - `closing`: the cutoff is set, and it leaves for good (closed, a parent's cascade, a
 *   finished one-shot child), or it is stopped with the process or abandoned to another owner.
 * - `settled` / `closed`: it left the live registry, by settling or otherwise.
 *
 * Invariants: the cutoff is set once (the first way of leaving wins); a phase never moves
 * back to `resident`; `settleQueued` exists only while resident; `ranATurn` only turns true.
 */
export const LIFECYCLE_PHASES = ['resident', 'settling', 'closing', 'settled', 'closed'] as const;
export type LifecyclePhase = (typeof LIFECYCLE_PHASES)[number];

export type Lifecycle = { readonly ranATurn: boolean } & (
  | { readonly phase: 'resident'; readonly settleQueued: boolean }
  | { readonly phase: Exclude<LifecyclePhase, 'resident'> }
);

/** How an incarnation leaves: by settling, or for good. */
export type Leaving = 'settle' | 'close';

export const RESIDENT: Lifecycle = { phase: 'resident', ranATurn: false, settleQueued: false };

/** Past the disposal cutoff: nothing new is admitted. */
export function isLeaving(lifecycle: Lifecycle): boolean {
  return lifecycle.phase !== 'resident';
}

/** It left (or is leaving) by settling, and has left the live registry. */
export function hasSettled(lifecycle: Lifecycle): boolean {
  return lifecycle.phase === 'settled';
}

/** A turn was admitted. Only a resident incarnation admits turns. */
export function turnAdmitted(lifecycle: Lifecycle): Lifecycle {
  if (lifecycle.phase !== 'resident' || lifecycle.ranATurn) return lifecycle;
  return { ...lifecycle, ranATurn: true };
}

/** Queue a settlement check; unchanged (the same value) when one is queued or it is leaving. */
export function queueSettle(lifecycle: Lifecycle): Lifecycle {
  if (lifecycle.phase !== 'resident' || lifecycle.settleQueued) return lifecycle;
  return { ...lifecycle, settleQueued: true };
}

/** The queued settlement check runs now: later changes may queue another. */
export function settleCheckRuns(lifecycle: Lifecycle): Lifecycle {
  if (lifecycle.phase !== 'resident' || !lifecycle.settleQueued) return lifecycle;
  return { ...lifecycle, settleQueued: false };
}

/** Set the disposal cutoff: resident -> settling | closing. Once set it stays as it is. */
export function beginLeaving(lifecycle: Lifecycle, how: Leaving): Lifecycle {
  if (lifecycle.phase !== 'resident') return lifecycle;
  return { phase: how === 'settle' ? 'settling' : 'closing', ranATurn: lifecycle.ranATurn };
}

/** It left the live registry: settling -> settled; closing (or, defensively, resident) -> closed. */
export function left(lifecycle: Lifecycle): Lifecycle {
  switch (lifecycle.phase) {
    case 'settling':
      return { phase: 'settled', ranATurn: lifecycle.ranATurn };
    case 'resident':
    case 'closing':
      return { phase: 'closed', ranATurn: lifecycle.ranATurn };
    default:
      return lifecycle;
  }
}
