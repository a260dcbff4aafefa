/**
 * The agent view the HTTP API returns, derived from a live agent or, for a child that is not
 * resident, from its durable session (never stored twice).
 */
import type { AgentView } from '../../contract/index.js';
import type { ActivationState, AgentStatus } from '../../domain/agent.js';
import type { PausedBy } from '../../domain/budget.js';
import type { SessionHeader } from '../../domain/session.js';
import { queuedCount, stagedCount } from '../../domain/turn-machine.js';
import type { LiveAgent } from '../live-agent.js';
import type { ActivationMark } from '../../sessions/session-store.js';
import type { UsageFigures } from '../../budgets/budgets.js';

/** `paused`: a budget stops the step it has to take (budgets.ts `pausedBy`). */
export function statusOf(agent: LiveAgent, paused = false): AgentStatus {
  if (agent.disposing) return agent.header.kind === 'root' ? 'disposing' : 'closed';
  if (paused) return 'paused';
  const busy = agent.state.turn.phase !== 'idle' || queuedCount(agent.state) > 0;
  return busy ? 'running' : 'idle';
}

export function viewOf(agent: LiveAgent, activation: ActivationState | null, figures: UsageFigures, pausedBy: PausedBy | undefined, waiting?: AgentView['waiting']): AgentView {
  const view: AgentView = {
    ...base(agent.header),
    status: statusOf(agent, pausedBy !== undefined),
    resident: true,
    activation: activation === null ? null : { state: activation },
    inbox: { queued: queuedCount(agent.state) },
    staged: stagedCount(agent.state),
    usage: figures.usage,
    budget: figures.budget,
  };
  if (pausedBy !== undefined) view.pausedBy = pausedBy;
  if (waiting !== undefined) view.waiting = waiting;
  const turn = agent.state.turn;
  if (turn.phase === 'running' && turn.turn.step.status === 'awaiting') {
    const { awaiting, calls } = turn.turn.step;
    view.awaiting = calls.filter((call) => awaiting.includes(call.id));
  }
  return view;
}

/**
 * A child that is not resident: `settled` when a followup could cold-resume it (continuable,
 * in-process, not closed for good), `closed` otherwise.
 */
export function storedChildView(header: SessionHeader, mark: ActivationMark | undefined, figures: UsageFigures): AgentView {
  const resumable = header.mode === 'continuable' && header.provider === 'in-process' && mark?.event !== 'closed';
  return {
    ...base(header),
    status: resumable ? 'settled' : 'closed',
    resident: false,
    activation: null,
    inbox: { queued: 0 },
    staged: 0,
    usage: figures.usage,
    budget: figures.budget,
  };
}

function base(h: SessionHeader): Pick<AgentView, 'id' | 'kind' | 'parentId' | 'mode' | 'provider' | 'depth' | 'label' | 'tenantId' | 'createdAt' | 'model'> {
  const view: Pick<AgentView, 'id' | 'kind' | 'parentId' | 'mode' | 'provider' | 'depth' | 'label' | 'tenantId' | 'createdAt' | 'model'> = {
    id: h.id,
    kind: h.kind,
    parentId: h.parentSession,
    mode: h.mode,
    provider: h.provider,
    depth: h.depth,
    createdAt: h.createdAt,
  };
  if (h.label !== undefined) view.label = h.label;
  if (h.tenantId !== undefined) view.tenantId = h.tenantId;
  if (h.model !== undefined) view.model = h.model;
  return view;
}
