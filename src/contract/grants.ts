/**
 * Grants as the API shows them: the tools an agent may call, as a list of names and `*`
 * patterns (the rules are domain/grants.ts), and an agent's grants with what they come to.
 */
import { Type, type Static } from '@sinclair/typebox';
import { GRANT_PATTERN } from '../domain/grants.js';
import { shared } from './schema.js';

export const Grants = shared(
  'Grants',
  Type.Array(Type.String({ pattern: GRANT_PATTERN, maxLength: 129 }), {
    maxItems: 256,
    description:
      'Tools granted: tool names (`send_message`, `mcp__files__read`, a declared backend tool), names ending in `*` for every tool with that prefix ' +
      '(`mcp__files__*`), or a package name for its tools (`subagent-control`). A child may be granted only what its parent and every ancestor hold.',
  }),
);
export type Grants = Static<typeof Grants>;

export const GrantsView = shared(
  'GrantsView',
  Type.Object(
    {
      grants: Type.Array(Type.String(), { description: "The agent's own grants (package names written as their tools)." }),
      effective: Type.Array(Type.String(), {
        description: 'The names of the known tools it may call now: granted to it and to every ancestor, installed, and in its scope.',
      }),
    },
    { additionalProperties: false },
  ),
);
export type GrantsView = Static<typeof GrantsView>;

export const GRANT_SCHEMAS = [Grants, GrantsView] as const;
