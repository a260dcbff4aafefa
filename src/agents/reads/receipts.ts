/**
 * Message receipts: where a message is, read from durable state only (pending: queued or
 * staged; in a session's log; as a turn's prompt). Waits for the writes accepted so far to
 * settle first, so a receipt never lags an acknowledged request.
 */
import type { Receipt } from '../../contract/index.js';
import { ServiceError } from '../../domain/errors.js';
import type { SessionLog } from '../../sessions/session-log.js';

/** Where a message is, from durable state: pending (queued, staged), in a log, as a turn's prompt. */
export async function receiptOf(log: SessionLog, messageId: string): Promise<Receipt> {
  await log.settled();
  const location = await log.store.locate(messageId);
  if (location === undefined) {
    throw new ServiceError('MESSAGE_NOT_FOUND', `message "${messageId}" is not queued, staged or in any session`);
  }
  const source = location.message.source;
  const receipt: Receipt = {
    messageId,
    state: location.state,
    recipient: location.sessionId,
    sender: 'senderSessionId' in source ? source.senderSessionId : null,
    source,
    role: location.message.role,
    timestamps: {},
  };
  if (location.acceptedAt !== undefined) receipt.timestamps.acceptedAt = location.acceptedAt;
  if (location.appendedAt !== undefined) receipt.timestamps.appendedAt = location.appendedAt;
  if (location.turnStartedAt !== undefined) receipt.timestamps.turnStartedAt = location.turnStartedAt;
  if (location.turnEndedAt !== undefined) receipt.timestamps.turnEndedAt = location.turnEndedAt;
  if (location.turnId !== undefined) receipt.turnId = location.turnId;
  if (location.seq !== undefined) receipt.seq = location.seq;
  return receipt;
}
