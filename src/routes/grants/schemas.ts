/**
 * Schemas of the grant operations.
 */
import { Type } from '@sinclair/typebox';
import { Grants, ref } from '../../contract/index.js';

export const GrantsBody = Type.Object({ grants: ref(Grants) }, { additionalProperties: false });
