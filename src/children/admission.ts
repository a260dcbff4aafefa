/**
 * Admission checks shared by every path that adds work below a parent: the process drain,
 * the scoped drain of forests being closed, the parent still being the exact live incarnation
 * and not past its disposal cutoff, the room for one more child, and durable lineage. Each
 * check is synchronous and changes nothing, so a caller runs it in the same synchronous span
 * as the state change it guards.
 */
import { MESSAGES, ServiceError } from '../domain/errors.js';
import type { SessionHeader } from '../domain/session.js';
import { DEFAULT_LIMITS } from '../agents/limits.js';
import type { LiveAgent } from '../agents/live-agent.js';
import type { ContinuationDeps, DeliveryPath } from './types.js';

export class Admission {
  /** Roots whose forests are being closed: admission is closed below them meanwhile. */
  private readonly closingScopes = new Set<string>();

  constructor(private readonly deps: Pick<ContinuationDeps, 'registry' | 'isDraining' | 'maxDepth' | 'quotas'>) {}

  /** Close admission below `rootId`, until `reopenScope`. */
  closeScope(rootId: string): void {
    this.closingScopes.add(rootId);
  }

  reopenScope(rootId: string): void {
    this.closingScopes.delete(rootId);
  }

  checkAdmission(agent: LiveAgent): void {
    if (this.deps.isDraining()) throw new ServiceError('DRAINING', MESSAGES.draining);
    if (this.closingScopes.has(agent.rootId)) {
      // The contract fixes one DRAINING text; the forest being drained is in the logs, not the message.
      throw new ServiceError('DRAINING', MESSAGES.draining);
    }
  }

  checkParentAdmits(parent: LiveAgent): void {
    this.checkAdmission(parent);
    if (this.deps.registry.get(parent.id) !== parent || parent.disposing) {
      throw new ServiceError('ACTIVATION_CLOSING', `subagent parent "${parent.id}" is being disposed; the child was not established`);
    }
  }

  /** Room for one more live child of `parent`: depth, the parent's children, the process, its tenant's quota. */
  checkChildRoom(parent: LiveAgent): void {
    const maxDepth = this.deps.maxDepth ?? DEFAULT_LIMITS.depth;
    if (parent.header.depth + 1 > maxDepth) {
      throw new ServiceError('LIMIT_EXCEEDED', `a child of "${parent.id}" would be at depth ${parent.header.depth + 1}; the deepest allowed is ${maxDepth}`);
    }
    this.checkLiveRoom(parent);
  }

  /** Room for one more live child of `parent` (a new one, or a stored one resumed): the parent's children, the process, its tenant's quota. */
  checkLiveRoom(parent: LiveAgent): void {
    this.deps.registry.checkRoom(parent.id);
    this.deps.quotas?.admitLive(parent.header.tenantId, false);
  }

  /** The recipient's durable lineage names exactly this live parent. */
  authorizeLineage(parent: LiveAgent, header: SessionHeader, path: DeliveryPath): void {
    if (header.kind !== 'child' || header.parentSession !== parent.id) {
      const message = path === 'tool'
        ? `subagent "${header.id}" belongs to another parent session`
        : `subagent "${header.id}" delivery requires the exact live parent agent`;
      throw new ServiceError('UNAUTHORIZED', message);
    }
    if (this.deps.registry.get(parent.id) !== parent || parent.disposing) {
      throw new ServiceError('UNAUTHORIZED', `subagent "${header.id}" delivery requires the exact live parent agent`);
    }
  }
}
