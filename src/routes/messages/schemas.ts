/**
 * Schemas of delivery receipts.
 */
import { Type } from '@sinclair/typebox';
import { MESSAGE_ROLES } from '../../domain/message.js';
import { RECEIPT_STATES } from '../../services/session-store.js';
import { AgentId, literals, MessageSource, OpaqueId, ref } from '../../contract/index.js';

export const MessageParams = Type.Object({ messageId: OpaqueId });

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
