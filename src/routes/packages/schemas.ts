/**
 * Schemas of the package resource.
 */
import { Type } from '@sinclair/typebox';
import { PACKAGE_NAMES, REPORT_DELIVERIES } from '../../domain/packages.js';
import { literals } from '../common-schemas.js';

const PackageConfig = Type.Object(
  { reportDelivery: Type.Optional(literals(REPORT_DELIVERIES, { description: 'subagent-report only: quiet (default) or wakeup.' })) },
  { additionalProperties: false },
);

export const PackageView = Type.Object(
  { name: literals(PACKAGE_NAMES), installed: Type.Boolean(), config: PackageConfig },
  { additionalProperties: false },
);

export const PackageList = Type.Object({ packages: Type.Array(PackageView) }, { additionalProperties: false });

export const PackageParams = Type.Object({ name: Type.String({ minLength: 1, maxLength: 100 }) });

export const InstallBody = Type.Object({ config: Type.Optional(PackageConfig) }, { additionalProperties: false });
