/**
 * A message's acknowledgement (its stable id, and for a followup or steer the inbox item) and
 * its delivery receipt: where the message is, read from durable state.
 */
import { Type, type Static } from '@sinclair/typebox';
import { MESSAGE_ROLES, RECEIPT_STATES } from '../domain/message.js';
import { AgentId } from './common.js';
import { literals, ref } from './schema.js';
import { MessageSource } from './sessions.js';

export const MessageAccepted = Type.Object(
  {
    messageId: Type.String({ description: 'The stable id of the message; the same id appears in the session.' }),
    inboxItemId: Type.Optional(Type.String({ description: 'The id of this followup/steer occurrence; absent for inject.' })),
    resumed: Type.Optional(Type.Object({ agentToken: Type.String() }, { additionalProperties: false })),
  },
  { additionalProperties: false },
);
export type MessageAccepted = Static<typeof MessageAccepted>;

export const Receipt = Type.Object(
  {
    messageId: Type.String(),
    state: literals(RECEIPT_STATES, {
      description:
        'queued: an inbox item not yet admitted; staged: context waiting for the next safe log position; appended: in the ' +
        "recipient's log; turn-started: the prompt of a turn that is open; turn-ended: the prompt of a turn that ended.",
    }),
    recipient: AgentId,
    sender: Type.Union([Type.String(), Type.Null()], { description: "The sending agent's id; null for the operator." }),
    source: ref(MessageSource),
    role: literals(MESSAGE_ROLES),
    timestamps: Type.Object(
      {
        acceptedAt: Type.Optional(Type.String({ format: 'date-time' })),
        appendedAt: Type.Optional(Type.String({ format: 'date-time' })),
        turnStartedAt: Type.Optional(Type.String({ format: 'date-time' })),
        turnEndedAt: Type.Optional(Type.String({ format: 'date-time' })),
      },
      { additionalProperties: false },
    ),
    turnId: Type.Optional(Type.String()),
    seq: Type.Optional(Type.Integer({ minimum: 1, description: "The message entry's seq in the recipient's session." })),
  },
  { additionalProperties: false },
);
export type Receipt = Static<typeof Receipt>;
