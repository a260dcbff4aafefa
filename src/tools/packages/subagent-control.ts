/**
 * Package `subagent-control`: `send_message`, `list_agents` and `interrupt_agent`, for every
 * agent that has continuable children. send_message continues a child's conversation as its
 * next turn, cold-resuming a settled child; only the exact live direct parent may send.
 * interrupt_agent cancels a live descendant's open turn (src/children/interrupts.ts).
 */
import { Type } from '@sinclair/typebox';
import type { ChildListing } from '../../contract/index.js';
import type { ChildLifecycle } from '../../children/child-lifecycle.js';
import type { ChildDelivery } from '../../children/types.js';
import { defineTool, toolInput } from '../define-tool.js';
import type { LiveAgent } from '../../agents/live-agent.js';
import type { ServiceTool, ToolOutcome } from '../tool-registry.js';

export const SEND_MESSAGE_DESCRIPTION =
  'Send a message to a background subagent by its subagent id, continuing the same conversation. It becomes the ' +
  "subagent's next turn: if it is still working, the message waits until its current turn finishes, so it cannot " +
  'redirect work already underway. This call returns no answer from the subagent — only confirmation that the message ' +
  'was delivered — so use it to give it more work. A failure means the message was NOT delivered.';

export const LIST_AGENTS_DESCRIPTION =
  'List the background subagents you started, with their status: running while they work, complete when they have nothing left to do. ' +
  'With scope "descendants", also the subagents they started, at every depth.';

export const INTERRUPT_AGENT_DESCRIPTION =
  "Interrupt a background subagent below you (any depth): its current turn stops at once. Messages already queued for it stay " +
  'queued and wait until you send it another message. Returns accepted: false when the subagent is not running here.';

const SendMessageInput = toolInput(
  Type.Object(
    {
      subagent_id: Type.String({ minLength: 1, description: 'The subagent id returned when the background subagent was started.' }),
      message: Type.String({ minLength: 1, description: 'The message to deliver to the subagent.' }),
    },
    { additionalProperties: false },
  ),
);
const ListAgentsInput = toolInput(
  Type.Object(
    {
      scope: Type.Optional(
        Type.Union([Type.Literal('children'), Type.Literal('descendants')], { description: 'children (default): the subagents you started; descendants: every depth.' }),
      ),
    },
    { additionalProperties: false },
  ),
);
const InterruptAgentInput = toolInput(
  Type.Object(
    { agent_id: Type.String({ minLength: 1, description: 'The id of the subagent to interrupt.' }) },
    { additionalProperties: false },
  ),
);

export interface ControlDeps {
  children: Pick<ChildLifecycle, 'deliverToChild'>;
  hasContinuableChildren(agent: LiveAgent): boolean;
  listChildren(agent: LiveAgent, scope: 'children' | 'descendants'): Promise<ChildListing[]>;
  /** The interrupt rule's `fromAncestor`: true when accepted; throws UNAUTHORIZED. */
  interrupt(caller: LiveAgent, targetId: string): boolean;
}

export function controlTools(deps: ControlDeps): ServiceTool[] {
  const inScope = (agent: LiveAgent): boolean => agent.header.provider !== 'remote' && deps.hasContinuableChildren(agent);
  const sendMessage = defineTool({
    name: 'send_message',
    description: SEND_MESSAGE_DESCRIPTION,
    input: SendMessageInput,
    inScope,
    async execute(input, { agent, accepted }) {
      const outcome = (delivered: ChildDelivery): ToolOutcome => ({
        output: { messageId: delivered.messageId },
        content: `message queued as the next turn for subagent ${input.subagent_id}`,
        ...(delivered.resumed === undefined ? {} : { resumed: [{ agentId: input.subagent_id, agentToken: delivered.resumed.agentToken }] }),
      });
      const delivered = await deps.children.deliverToChild(
        agent,
        input.subagent_id,
        'followup',
        input.message,
        { kind: 'coordinator', senderSessionId: agent.id },
        'tool',
        (d) => accepted?.(outcome(d)),
      );
      return outcome(delivered);
    },
  });
  const listAgents = defineTool({
    name: 'list_agents',
    description: LIST_AGENTS_DESCRIPTION,
    input: ListAgentsInput,
    inScope,
    async execute(input, { agent }) {
      const scope = input.scope ?? 'children';
      const children = await deps.listChildren(agent, scope);
      const line = (c: ChildListing): string => {
        const text = `${c.id} [${c.status}] — ${c.label}`;
        return scope === 'children' ? text : `${text} (parent ${c.parentId}, depth ${c.depth})`;
      };
      const content = children.length === 0 ? '(no subagents)' : children.map(line).join('\n');
      return { output: children, content };
    },
  });
  const interruptAgent = defineTool({
    name: 'interrupt_agent',
    description: INTERRUPT_AGENT_DESCRIPTION,
    input: InterruptAgentInput,
    inScope,
    execute(input, { agent, accepted }) {
      const outcome: ToolOutcome = { output: { accepted: deps.interrupt(agent, input.agent_id) }, content: `interrupt requested for agent ${input.agent_id}` };
      accepted?.(outcome);
      return outcome;
    },
  });
  return [sendMessage, listAgents, interruptAgent];
}
