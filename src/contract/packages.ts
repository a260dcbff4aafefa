/**
 * Tool packages as the API shows them: a package's name, whether it is installed, its config.
 */
import { Type, type Static } from '@sinclair/typebox';
import { PACKAGE_NAMES, REPORT_DELIVERIES } from '../domain/packages.js';
import { literals, ref, shared } from './schema.js';

export const PackageConfig = shared(
  'PackageConfig',
  Type.Object(
    { reportDelivery: Type.Optional(literals(REPORT_DELIVERIES, { description: 'subagent-report only: quiet (default) or wakeup.' })) },
    { additionalProperties: false, description: "A package's configuration." },
  ),
);

export const PackageView = shared(
  'PackageView',
  Type.Object(
    { name: literals(PACKAGE_NAMES), installed: Type.Boolean(), config: ref(PackageConfig) },
    { additionalProperties: false, description: 'A tool package and its configuration.' },
  ),
);
export type PackageView = Static<typeof PackageView>;

export const PACKAGE_SCHEMAS = [PackageConfig, PackageView] as const;
