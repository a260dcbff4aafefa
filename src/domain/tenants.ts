/**
 * Tenants: the customers of a team that runs agentforest for others. A tenant key acts as the
 * operator for its own tenant only; an admin key (AGENTFOREST_API_KEYS) acts for everyone.
 *
 * - A tenant owns the roots made with its key, and every child of them (a child belongs to its
 *   root's tenant); and the webhook subscriptions, tool servers, backend tools and approval
 *   rules made with its key. Those made with an admin key are global.
 * - Another tenant's resource does not exist for a tenant: it is answered as an unknown id.
 * - A key is `afk_` and 43 characters; only its SHA-256 is stored, under a key id.
 * - Quotas are optional, each a whole number; absent means no limit.
 */

/** What a tenant id may be. */
export const TENANT_ID_PATTERN = '^[a-z0-9][a-z0-9-]{0,62}$';

/** Every tenant key starts so: a bearer key that does is looked up among the tenants' keys. */
export const TENANT_KEY_PREFIX = 'afk_';

export const QUOTA_NAMES = ['maxLiveAgents', 'maxRoots', 'stepsPerMinute', 'tokensPerDay', 'costMicroUsdPerDay'] as const;
export type QuotaName = (typeof QUOTA_NAMES)[number];
export type Quotas = Partial<Record<QuotaName, number>>;

/** A tenant as stored. */
export interface Tenant {
  id: string;
  name?: string;
  quotas?: Quotas;
  /** The model key variables its driven agents may name (and only its agents). */
  modelKeyEnvs?: string[];
  createdAt: string;
  updatedAt: string;
}

/** A tenant key as stored: the digest of the key, never the key. */
export interface TenantKey {
  keyId: string;
  tenantId: string;
  /** SHA-256 of the key, hex. */
  digest: string;
  createdAt: string;
}

/** Who is asking: an admin key (or no key, where none is configured), or a tenant's key. */
export type Principal = { kind: 'admin' } | { kind: 'tenant'; tenantId: string; keyId: string };

export const ADMIN: Principal = { kind: 'admin' };

/**
 * The tenant a resource made by `principal` belongs to (undefined: global, made by an admin).
 */
export function ownerFor(principal: Principal): string | undefined {
  return principal.kind === 'tenant' ? principal.tenantId : undefined;
}

/**
 * Whether `principal` may see a resource owned by `owner` (undefined: global). Global
 * resources are visible to a tenant only where `globalVisible` (tool servers, backend tools,
 * rules: they act on its agents), never webhooks (they carry every tenant's events).
 */
export function sees(principal: Principal, owner: string | undefined, globalVisible: boolean): boolean {
  return tenantSees(ownerFor(principal), owner, globalVisible);
}

/** `sees` for a caller given by its tenant (undefined: an admin). */
export function tenantSees(tenantId: string | undefined, owner: string | undefined, globalVisible: boolean): boolean {
  if (tenantId === undefined) return true;
  return owner === undefined ? globalVisible : owner === tenantId;
}
