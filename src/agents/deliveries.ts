/**
 * What callers send into agents over HTTP: a message to a root (from the operator) or to a
 * child (from its exact live direct parent), and a child started by its parent. Each may carry
 * an idempotency key; a retry then returns the first outcome.
 *
 * Invariants: authority is checked in the synchronous span that acts (see authority.ts); a
 * stored idempotent result never holds a token, so a replay names the agent's current one.
 */
import type { Delivery } from '../domain/agent.js';
import { MESSAGES, ServiceError } from '../domain/errors.js';
import type { TextBlock } from '../domain/message.js';
import type { ModelSpec } from '../domain/model.js';
import type { AgentRegistry } from './agent-registry.js';
import type { ChildLifecycle } from '../children/child-lifecycle.js';
import type { ChildDelivery, ChildSpec } from '../children/types.js';
import type { IdempotencyKeys, IdempotencyRequest, IdempotentResult } from '../sessions/idempotency.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { AgentWithToken, ChildCreated, MessageAccepted } from '../contract/index.js';
import type { AdmissionGate } from './admission-gate.js';
import type { AgentQueries } from './reads/agent-queries.js';
import type { AgentAuthority } from './authority.js';

/** The operator as an idempotency sender: no agent id can be spelled this way (ids start with a letter or digit). */
export const OPERATOR_SENDER = '@operator';

/**
 * Who sends the operator's requests to a root, for idempotency keys: the operator, or for a
 * tenant's root that tenant's operator, so no two tenants share a key space.
 */
export function operatorSender(tenantId: string | undefined): string {
  return tenantId === undefined ? OPERATOR_SENDER : `${OPERATOR_SENDER}:${tenantId}`;
}

/** A message accepted, and whether an idempotency key replayed it (wider than the wire's answer, which omits `replayed`). */
export type Delivered = MessageAccepted & { replayed: boolean };

/** What an idempotency key keeps of a delivery: the wire's answer, a resumed child's token blanked. */
type StoredDelivery = MessageAccepted;

/** What an idempotency key keeps of a child creation: the wire's answer without the token. */
type StoredChild = Omit<ChildCreated, 'agentToken'>;

export interface DeliveriesDeps {
  registry: AgentRegistry;
  children: Pick<ChildLifecycle, 'startChild' | 'deliverToChild'>;
  log: SessionLog;
  gate: AdmissionGate;
  authority: AgentAuthority;
  queries: AgentQueries;
  idempotency: IdempotencyKeys;
  /** Throws VALIDATION unless a child's `model` may be used; returns it normalised (see driver/model-policy.ts). */
  checkModel?: (spec: ModelSpec, tenantId?: string) => ModelSpec;
}

export class AgentDeliveries {
  constructor(private readonly deps: DeliveriesDeps) {}

  /**
   * Start a child of the agent whose token this is. With an idempotency key, a retry returns
   * the same child and message id (and the child's current token while it is resident).
   */
  async startChild(
    parentId: string,
    token: string | undefined,
    spec: ChildSpec,
    idem?: IdempotencyRequest,
  ): Promise<AgentWithToken & { messageId: string; replayed: boolean }> {
    this.deps.gate.admitNewWork(MESSAGES.draining);
    const { authority, queries } = this.deps;
    const parent = authority.liveWithToken(parentId, token) ?? (await authority.rejectCredential(parentId));
    // Only after the credential: a caller without one learns nothing about the key variables.
    if (spec.model !== undefined) {
      if (spec.provider === 'remote') throw new ServiceError('VALIDATION', 'a remote child runs its turns elsewhere: it cannot have a model');
      spec = { ...spec, model: this.deps.checkModel?.(spec.model, parent.tenantId) ?? spec.model };
    }
    const result = await this.deps.idempotency.run<StoredChild>({ sender: parent.id, rootId: parent.rootId }, idem, 201, async (record) => {
      const { agent, messageId } = await this.deps.children.startChild(parent, spec, (started) =>
        record({ agent: queries.viewOfLive(started.agent), messageId: started.messageId }),
      );
      return { agent: queries.viewOfLive(agent), messageId };
    });
    const { agent, messageId } = result.body;
    return { agent, agentToken: authority.currentToken(agent.id), messageId, replayed: result.replayed };
  }

  /**
   * Deliver a message. Roots take it from the operator; a child only from its exact live
   * direct parent (that parent's token), and a settled child is cold-resumed.
   */
  async deliver(id: string, token: string | undefined, content: string | TextBlock[], delivery: Delivery, idem?: IdempotencyRequest): Promise<Delivered> {
    const live = this.deps.registry.get(id);
    const header = live?.header ?? (await this.deps.queries.storedHeader(id));
    if (header === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" does not exist`);
    // Once the recipient's kind is known, so the refusal says what drains: the service, or (for
    // a child) its continuable subagents. A live recipient is known without awaiting.
    this.deps.gate.admitNewWork(header.kind === 'root' ? MESSAGES.serviceDraining : MESSAGES.draining);
    let result: IdempotentResult<StoredDelivery>;
    if (header.kind === 'root') {
      result = await this.deps.idempotency.run<StoredDelivery>({ sender: operatorSender(header.tenantId), rootId: id }, idem, 202, async (record) => {
        const agent = this.deps.registry.get(id);
        if (agent === undefined) throw new ServiceError('AGENT_NOT_FOUND', `agent "${id}" is not live; resume it first`);
        const accepted = agent.deliver(delivery, content);
        record(accepted);
        await this.deps.log.durable(id);
        return accepted;
      });
    } else {
      const parent = this.deps.registry.get(header.parentSession ?? '');
      if (parent === undefined || !parent.authenticates(token)) {
        throw new ServiceError('UNAUTHORIZED', `subagent "${id}" delivery requires the exact live parent agent`);
      }
      const source = { kind: 'coordinator' as const, senderSessionId: parent.id };
      result = await this.deps.idempotency.run<StoredDelivery>({ sender: parent.id, rootId: parent.rootId }, idem, 202, async (record) => {
        const stored = (d: ChildDelivery): StoredDelivery => ({ ...d, ...(d.resumed === undefined ? {} : { resumed: { agentToken: '' } }) });
        const delivered = await this.deps.children.deliverToChild(parent, id, delivery, content, source, 'http', (d) => record(stored(d)));
        return delivered;
      });
    }
    const body = result.body;
    // A stored result never holds a token: a replay names the child's current one.
    const resumed = body.resumed === undefined ? undefined : { agentToken: result.replayed ? this.deps.authority.currentToken(id) : body.resumed.agentToken };
    const out: Delivered = { messageId: body.messageId, replayed: result.replayed };
    if (body.inboxItemId !== undefined) out.inboxItemId = body.inboxItemId;
    if (resumed !== undefined) out.resumed = resumed;
    return out;
  }
}
