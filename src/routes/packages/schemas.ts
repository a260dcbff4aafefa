/**
 * Schemas of the package operations; the package view is in the wire contract (src/contract/).
 */
import { Type } from '@sinclair/typebox';
import { PackageConfig, PackageView, ref } from '../../contract/index.js';

export const PackageList = Type.Object({ packages: Type.Array(ref(PackageView)) }, { additionalProperties: false });

export const PackageParams = Type.Object({ name: Type.String({ minLength: 1, maxLength: 100 }) });

export const InstallBody = Type.Object({ config: Type.Optional(ref(PackageConfig)) }, { additionalProperties: false });
