/**
 * The lifecycle of child agents, built in order from its parts; each part is handed to whoever
 * needs it, and nothing forwards to them:
 * - activations.ts and admission.ts: the Activation registry and the admission checks they share;
 * - child-lock.ts: serialises a child's resumes and disposals, and writes to its session while it
 *   is not resident;
 * - closing.ts: settling and closing, and forgetting without writing;
 * - child-lifecycle.ts: starting, delivering to and cold-resuming children;
 * - report-rule.ts: the report rule (who may report, to whom, and how it is delivered).
 *
 * Authority for every delivery is the exact live incarnation (object identity), checked in the
 * same synchronous span as the send. Every asynchronous window (setup, store reads) is followed
 * by a re-check before anything is published. An incarnation's lifecycle is one value on the
 * agent (domain/lifecycle.ts); Activation states are derived from it and from the turn state.
 */
import { Activations } from './activations.js';
import { Admission } from './admission.js';
import { ChildLifecycle } from './child-lifecycle.js';
import { ChildLock } from './child-lock.js';
import { Closing } from './closing.js';
import { ReportRule } from './report-rule.js';
import type { ContinuationDeps } from './types.js';

export interface Continuation {
  activations: Activations;
  lock: ChildLock;
  closing: Closing;
  children: ChildLifecycle;
  reports: ReportRule;
}

export function buildContinuation(deps: ContinuationDeps): Continuation {
  const activations = new Activations(deps.registry);
  const admission = new Admission(deps);
  const lock = new ChildLock();
  const closing = new Closing(deps, activations, admission, lock);
  const children = new ChildLifecycle(deps, activations, admission, lock, closing);
  const reports = new ReportRule(deps, activations, admission, children);
  return { activations, lock, closing, children, reports };
}
