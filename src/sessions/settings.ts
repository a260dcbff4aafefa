/**
 * Operator settings as the store sees them: small named JSON documents of a few kinds (MCP
 * tool servers, declared backend tools, approval rules, tenants and their key digests), keyed by (kind, name).
 * They change through the same batches as everything else (`WriteBatch.settings`), in the
 * order given, inside the batch's transaction: a put replaces the whole row, a delete of a
 * missing row does nothing. A setting belongs to no forest, so a fence never leaves it out
 * (batch-forests.ts). The stores keep the kind as plain text: a new kind is one more literal
 * here and needs no migration.
 */

export const SETTING_KINDS = ['tool-server', 'backend-tool', 'approval-rule', 'tenant', 'tenant-key'] as const;
export type SettingKind = (typeof SETTING_KINDS)[number];

/** One operator setting: a named JSON document of one kind. `value` is any JSON value (an object in practice). */
export interface StoredSetting {
  kind: SettingKind;
  name: string;
  value: unknown;
  /** When it was last put (ISO time). */
  updatedAt: string;
}

export type SettingChange = { op: 'put'; setting: StoredSetting } | { op: 'delete'; kind: SettingKind; name: string };

/** The store's setting reads (writes go through WriteBatch). */
export interface SettingReads {
  /** Every setting of a kind, ordered by name. */
  list(kind: SettingKind): Promise<StoredSetting[]>;
  /** One setting, or undefined. */
  get(kind: SettingKind, name: string): Promise<StoredSetting | undefined>;
}
