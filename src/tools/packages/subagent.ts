/**
 * Package `subagent`: the global `spawn_subagent` tool, for every in-process agent. It starts
 * a continuable in-process child whose first turn is the prompt. Where the deployment lets the
 * model grant budgets (AGENTFOREST_SPAWN_BUDGETS=on), its input also takes `budget`, a grant
 * out of what the budgets above the caller have left; otherwise the model never sees it.
 */
import { Type } from '@sinclair/typebox';
import { Budget } from '../../contract/index.js';
import type { ChildLifecycle } from '../../children/child-lifecycle.js';
import { defineTool, toolInput } from '../define-tool.js';
import type { LiveAgent } from '../../agents/live-agent.js';
import type { ServiceTool, ToolOutcome } from '../tool-registry.js';

export const SPAWN_SUBAGENT_DESCRIPTION =
  'Start a background subagent that works on the prompt in its own conversation. It returns its subagent id at once; ' +
  'the subagent keeps its conversation after it finishes, so you can give it more work later with send_message, and it ' +
  'can report findings back to you while it works.';

const SPAWN_FIELDS = {
  prompt: Type.String({ minLength: 1, description: 'The task: the subagent starts with this as its first message.' }),
  label: Type.Optional(Type.String({ maxLength: 200, description: 'A short name for the subagent, shown in list_agents.' })),
  tools: Type.Optional(
    Type.Array(Type.String({ minLength: 1, maxLength: 129 }), {
      maxItems: 256,
      description: 'The tools the subagent may use, out of yours (a name ending in * covers a prefix). Absent: all of yours.',
    }),
  ),
};

/** The input with a grant, when the model may give one. */
const GRANT_FIELD = {
  budget: Type.Optional(
    Type.Object(Budget.properties, {
      additionalProperties: false,
      description: 'Limits for the subagent and everything it starts (tokens, steps, costMicroUsd); they may not exceed what your own budget has left.',
    }),
  ),
};

const SpawnInput = toolInput(Type.Object(SPAWN_FIELDS, { additionalProperties: false }));
const SpawnInputWithGrant = toolInput(Type.Object({ ...SPAWN_FIELDS, ...GRANT_FIELD }, { additionalProperties: false }));

export function spawnSubagentTool(children: Pick<ChildLifecycle, 'startChild'>, options: { modelGrants: boolean } = { modelGrants: false }): ServiceTool {
  return defineTool({
    name: 'spawn_subagent',
    description: SPAWN_SUBAGENT_DESCRIPTION,
    // Without grants the schema has no `budget` (and refuses one); the input type is the wider one.
    input: (options.modelGrants ? SpawnInputWithGrant : SpawnInput) as typeof SpawnInputWithGrant,
    inScope: (agent) => agent.header.provider !== 'remote',
    async execute(input, { agent, accepted }) {
      const spec = {
        mode: 'continuable' as const,
        provider: 'in-process' as const,
        prompt: input.prompt,
        ...(input.tools === undefined ? {} : { tools: input.tools }),
        ...(input.budget === undefined ? {} : { budget: input.budget }),
      };
      const outcome = (child: LiveAgent): ToolOutcome => ({
        output: { subagent_id: child.id },
        content: `started background subagent ${child.id}`,
        spawned: [{ agentId: child.id, agentToken: child.token }],
      });
      const { agent: child } = await children.startChild(agent, input.label === undefined ? spec : { ...spec, label: input.label }, (started) =>
        accepted?.(outcome(started.agent)),
      );
      return outcome(child);
    },
  });
}
