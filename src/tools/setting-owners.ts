/**
 * Who may change a named operator setting (a tool server, a backend tool, an approval rule),
 * checked by its registry in the synchronous span that queues the change: the route's hook
 * (routes/tenant-access.ts) checked before the operation, but a name may have been taken by
 * another tenant since (two creates racing), and only this span can tell.
 *
 * - A tenant key changes its own settings and creates new ones as its own. Another tenant's
 *   name is answered as an unknown one (the route's not-found body); a global one (an admin's)
 *   is 403 UNAUTHORIZED.
 * - An admin key changes anything. Putting over a tenant's setting keeps that tenant as its
 *   owner: an admin fixes a tenant's setting without handing it to every tenant (a global
 *   setting is every tenant's to use). A new setting made by an admin is global.
 *
 * `tenantId` is the caller's tenant, undefined for an admin key; `current` the owner of the
 * setting now (`{}` global, `{owner}` a tenant's), undefined when there is none.
 *
 * The check is exact on one instance, where every change of a registry passes its queue. With
 * several, the names are the cluster's and each instance checks what it has followed: two
 * tenants creating one name on two instances within the settings' follow period may both
 * succeed, and the last write stands.
 */
import { ServiceError } from '../domain/errors.js';
import { tenantSees } from '../domain/tenants.js';

export type SettingOwner = { owner?: string } | undefined;

/** The owner the setting has once `tenantId` puts it (undefined: global); throws when it may not. */
export function ownerAfterPut(name: string, tenantId: string | undefined, current: SettingOwner, unknown: () => ServiceError): string | undefined {
  if (tenantId === undefined) return current?.owner;
  if (current !== undefined) mayChange(name, tenantId, current, unknown);
  return tenantId;
}

/** Throws unless `tenantId` (undefined: an admin) may change or remove the setting `current` owns. */
export function mayChange(name: string, tenantId: string | undefined, current: { owner?: string }, unknown: () => ServiceError): void {
  if (tenantId === undefined || current.owner === tenantId) return;
  if (current.owner === undefined) throw new ServiceError('UNAUTHORIZED', `"${name}" is global: only an admin key may change it`);
  throw unknown();
}

/** Whether a tenant (undefined: an admin, who sees all) sees a setting its owner made: its own and the global ones. */
export function seesSetting(tenantId: string | undefined, owner: string | undefined): boolean {
  return tenantSees(tenantId, owner, true);
}

/** `{tenantId}` for a tenant's setting, nothing for a global one: spread into what is stored and shown. */
export function ownedBy(tenantId: string | undefined): { tenantId?: string } {
  return tenantId === undefined ? {} : { tenantId };
}

/** The ownership the tenant check reads (routes/tenant-access.ts): `{}` for a global setting, `{owner}` for a tenant's. */
export function ownership(tenantId: string | undefined): { owner?: string } {
  return tenantId === undefined ? {} : { owner: tenantId };
}
