/**
 * Schemas of delivery receipts; the receipt itself is in the wire contract (src/contract/).
 */
import { Type } from '@sinclair/typebox';
import { OpaqueId } from '../../contract/index.js';

export { Receipt } from '../../contract/index.js';

export const MessageParams = Type.Object({ messageId: OpaqueId });
