/**
 * Tool packages as the API shows them: a package's name, whether it is installed, its config;
 * and what the packages' tools return as a tool result's `output`.
 */
import { Type, type Static } from '@sinclair/typebox';
import { PACKAGE_NAMES, REPORT_DELIVERIES, SETTLEMENT_NOTICE_MODES } from '../domain/packages.js';
import { literals, ref, shared } from './schema.js';

export const PackageConfig = shared(
  'PackageConfig',
  Type.Object(
    {
      reportDelivery: Type.Optional(
        literals(REPORT_DELIVERIES, {
          description: 'subagent-report only: quiet (default), wakeup, or next-step (joins the next step of the parent\'s open turn, else like wakeup). Applies to the next Activation.',
        }),
      ),
      settlementNotices: Type.Optional(
        literals(SETTLEMENT_NOTICE_MODES, {
          description: 'subagent-report only: off (default), failures or all: which turn ends of a continuable child put a quiet notice in its live parent. Applies at once.',
        }),
      ),
    },
    { additionalProperties: false, description: "A package's configuration." },
  ),
);
export type PackageConfig = Static<typeof PackageConfig>;

export const PackageView = shared(
  'PackageView',
  Type.Object(
    { name: literals(PACKAGE_NAMES), installed: Type.Boolean(), config: ref(PackageConfig) },
    { additionalProperties: false, description: 'A tool package and its configuration.' },
  ),
);
export type PackageView = Static<typeof PackageView>;

export const UnconfirmedInstance = shared(
  'UnconfirmedInstance',
  Type.Object(
    {
      instanceId: Type.String({ description: "The instance's id in forest leases (AGENTFOREST_INSTANCE_ID)." }),
      url: Type.String({ description: 'The URL it advertises.' }),
    },
    { additionalProperties: false, description: 'An instance holding a live forest lease that did not confirm a package change in time; it cannot deliver a report until it applies the change.' },
  ),
);
export type UnconfirmedInstance = Static<typeof UnconfirmedInstance>;

/** The answer to a package change: the package as it is now, and who has not applied the change yet. */
export const PackageChangeView = shared(
  'PackageChangeView',
  Type.Object(
    {
      name: literals(PACKAGE_NAMES),
      installed: Type.Boolean(),
      config: ref(PackageConfig),
      unconfirmed: Type.Optional(
        Type.Array(ref(UnconfirmedInstance), {
          minItems: 1,
          description: 'Several instances on PostgreSQL only, and only when not empty: the instances that did not confirm the change within AGENTFOREST_CONFIG_CONFIRM_MS.',
        }),
      ),
    },
    { additionalProperties: false, description: 'A tool package and its configuration after a change.' },
  ),
);
export type PackageChangeView = Static<typeof PackageChangeView>;

/** One item of the `list_agents` tool's output (subagent-control): a background subagent the caller started. */
export const ChildListing = Type.Object(
  {
    kind: Type.Literal('child'),
    id: Type.String(),
    label: Type.String(),
    status: Type.Union([Type.Literal('running'), Type.Literal('complete')]),
    parentId: Type.String(),
    depth: Type.Integer({ minimum: 1 }),
  },
  { additionalProperties: false },
);
export type ChildListing = Static<typeof ChildListing>;

export const PACKAGE_SCHEMAS = [PackageConfig, PackageView, UnconfirmedInstance, PackageChangeView] as const;
