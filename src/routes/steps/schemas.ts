/**
 * Schemas of the step protocol: claiming a model request, posting its output, posting the
 * results of the backend's own tools. The output and tool-result shapes, which the services
 * share, are in the wire contract (src/contract/).
 */
import { Type } from '@sinclair/typebox';
import { AgentId, exactInteger, OpaqueId, ref, Step, StepLease, TokenUsage } from '../../contract/index.js';

export { CompactionEntry } from '../../contract/index.js';

export { OutputBody, OutputResult, PoolClaimResult, ToolResultsBody } from '../../contract/index.js';

export const MAX_WAIT_MS = 60_000;

const WaitMs = Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_MS, default: 0, description: 'Long-poll up to this long for a step.' }));

const Since = Type.Optional(
  Type.String({
    minLength: 1,
    maxLength: 200,
    description:
      "Delta steps: the id of the agent's earlier step whose messages the caller holds. The step then carries `messagesSince` " +
      '(the messages after that step\'s) instead of `messages`. An unknown step, a step of another agent, or a compaction since ' +
      "that step gives the full `messages`.",
  }),
);

export const ClaimBody = Type.Object({ waitMs: WaitMs, since: Since }, { additionalProperties: false });

export const PoolClaimBody = Type.Object(
  { waitMs: WaitMs, rootId: Type.Optional(AgentId), since: Since },
  { additionalProperties: false },
);

export const StepParams = Type.Object({ id: AgentId, stepId: OpaqueId });

/** The fence of a step request: the attempt whose claim holds the step (absent: 1). */
export const StepAttemptHeaders = Type.Object({
  'x-step-attempt': Type.Optional(
    exactInteger({ minimum: 1, description: "The lease's attempt from the claim (step.lease.attempt); absent means 1." }),
  ),
});

export const HeartbeatResult = Type.Object({ lease: ref(StepLease) }, { additionalProperties: false });

export const ClaimResult = Type.Object({ step: ref(Step) }, { additionalProperties: false });

export const ToolResultsResult = Type.Object(
  { turn: Type.Union([Type.Literal('open'), Type.Literal('ended')]) },
  { additionalProperties: false },
);

export const CompactionBody = Type.Object(
  {
    summary: Type.String({ minLength: 1, maxLength: 1_000_000, description: 'Stands for the conversation through throughSeq in every later step.' }),
    throughSeq: Type.Optional(
      exactInteger({
        minimum: 1,
        description:
          "The last seq the summary stands for (absent: the session's last entry). Past the previous compaction's, within the log, " +
          'and never between a tool call and its result.',
      }),
    ),
    usage: Type.Optional(ref(TokenUsage)),
  },
  { additionalProperties: false },
);

const reset = Type.Optional(Type.Literal(true, { description: "What this step's earlier deltas built is void (the answer is being written again)." }));

/** A piece is text or a part of one tool call, never both (as the driver publishes them). */
const DeltaPieceBody = Type.Union(
  [
    Type.Object({ text: Type.String({ minLength: 1, maxLength: 65_536, description: "A piece of the answer's text." }), reset }, { additionalProperties: false }),
    Type.Object(
      {
        toolCall: Type.Object(
          {
            index: Type.Integer({ minimum: 0, maximum: 127, description: 'Which call of the answer (0 is the first).' }),
            id: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
            name: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'The whole name; one given again replaces it.' })),
            argumentsDelta: Type.Optional(Type.String({ minLength: 1, maxLength: 65_536, description: "A piece of the call's arguments (JSON text)." })),
          },
          { additionalProperties: false, minProperties: 2 },
        ),
        reset,
      },
      { additionalProperties: false },
    ),
  ],
  { description: 'A piece of the answer: text, or a part of one tool call.' },
);

export const DeltasBody = Type.Union([DeltaPieceBody, Type.Array(DeltaPieceBody, { minItems: 1, maxItems: 256 })], {
  description: 'One piece of the answer being written, or several in order.',
});

export const DeltasResult = Type.Object(
  { seq: Type.Integer({ minimum: 1, description: 'The seq of the last delta published (counted from 1 per step attempt).' }) },
  { additionalProperties: false },
);
