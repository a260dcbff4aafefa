/**
 * The agent view the HTTP API returns, derived from a live agent (never stored twice).
 */
import type { ActivationState, AgentKind, AgentStatus, ChildMode, Provider } from '../domain/agent.js';
import { queuedCount, stagedCount } from '../domain/turn-machine.js';
import type { LiveAgent } from './live-agent.js';

export interface AgentView {
  id: string;
  kind: AgentKind;
  parentId: string | null;
  mode: ChildMode | null;
  provider: Provider | null;
  depth: number;
  label?: string;
  status: AgentStatus;
  resident: boolean;
  activation: { state: ActivationState } | null;
  inbox: { queued: number };
  staged: number;
  createdAt: string;
}

export function statusOf(agent: LiveAgent): AgentStatus {
  if (agent.disposing) return 'disposing';
  const busy = agent.state.turn.phase !== 'idle' || queuedCount(agent.state) > 0;
  return busy ? 'running' : 'idle';
}

export function viewOf(agent: LiveAgent): AgentView {
  const h = agent.header;
  const view: AgentView = {
    id: h.id,
    kind: h.kind,
    parentId: h.parentSession,
    mode: h.mode,
    provider: h.provider,
    depth: h.depth,
    status: statusOf(agent),
    resident: true,
    activation: null,
    inbox: { queued: queuedCount(agent.state) },
    staged: stagedCount(agent.state),
    createdAt: h.createdAt,
  };
  if (h.label !== undefined) view.label = h.label;
  return view;
}
