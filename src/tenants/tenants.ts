/**
 * The tenants and their keys: `/v1/tenants…` (admin keys only). Both are operator settings
 * (kinds `tenant` and `tenant-key`), durable before they are answered; with several instances
 * each follows the stored ones like the other settings (settings-follow.ts), so a revoked key
 * is refused on every instance within that bound.
 *
 * A key is shown once, when it is made; only its SHA-256 is kept, and a presented key is found
 * by its digest. Deleting a tenant revokes its keys; what it made stays stored (an admin still
 * reads it) and is its again if a tenant of the same id is made.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { ServiceError } from '../domain/errors.js';
import type { Clock } from '../domain/ports.js';
import { TENANT_KEY_PREFIX, type Quotas, type Tenant, type TenantKey } from '../domain/tenants.js';
import type { SessionLog } from '../sessions/session-log.js';
import type { SettingReads } from '../sessions/settings.js';
import type { Caller } from '../topology/topology.js';
import { SettingsFollow } from '../tools/settings-follow.js';
import { KeyRevocations } from './key-revocations.js';

export interface TenantsDeps {
  log: Pick<SessionLog, 'changeSettings' | 'durable'>;
  settings: SettingReads;
  clock: Clock;
  logger: Logger;
  /** Whether the tenant has live agents (on any instance, asked with the caller's key): it may not be deleted then. */
  hasLiveAgents: (tenantId: string, caller: Caller | undefined) => Promise<boolean>;
  /** The same, of this instance alone and at once (agents live here, roots being made here). */
  hasLiveHere: (tenantId: string) => boolean;
  /** A tenant's quotas or model keys changed (here, or followed from another instance). */
  onChange?: (tenantId: string) => void;
}

export interface TenantChange {
  name?: string;
  quotas?: Quotas;
  modelKeyEnvs?: string[];
}

export class Tenants {
  /** What ends when a key is revoked: the requests open with it. */
  readonly revocations = new KeyRevocations();
  private readonly tenants = new Map<string, Tenant>();
  /** Keys by the hex digest of the key. */
  private readonly keys = new Map<string, TenantKey>();
  private readonly follow = new SettingsFollow(() => this.sync());

  constructor(private readonly deps: TenantsDeps) {}

  /** Read the stored tenants; with `followMs` (several instances), follow them at that period. */
  start(followMs?: number): Promise<void> {
    return this.follow.start(followMs);
  }

  resync(): void {
    this.follow.again();
  }

  stop(): void {
    this.follow.stop();
  }

  /** Whether any tenant is defined (none: a single-tenant deployment). */
  get any(): boolean {
    return this.tenants.size > 0;
  }

  /** The tenant and key id of a presented key, or undefined for a key that is unknown or revoked. */
  keyOf(key: string): { tenantId: string; keyId: string } | undefined {
    const found = this.keys.get(hexDigest(key));
    return found !== undefined && this.tenants.has(found.tenantId) ? { tenantId: found.tenantId, keyId: found.keyId } : undefined;
  }

  /** The tenant a model key variable is given to (its modelKeyEnvs), if one is. */
  keyOwner(name: string): string | undefined {
    for (const tenant of this.tenants.values()) if (tenant.modelKeyEnvs?.includes(name) === true) return tenant.id;
    return undefined;
  }

  find(id: string): Tenant | undefined {
    return this.tenants.get(id);
  }

  get(id: string): Tenant {
    return this.require(id);
  }

  list(): Tenant[] {
    return [...this.tenants.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
  }

  /** The key ids of a tenant (never the keys). */
  keysOf(id: string): { keyId: string; createdAt: string }[] {
    return [...this.keys.values()].filter((k) => k.tenantId === id).map((k) => ({ keyId: k.keyId, createdAt: k.createdAt })).sort((a, b) => (a.keyId < b.keyId ? -1 : 1));
  }

  create(id: string, change: TenantChange): Promise<Tenant> {
    return this.follow.serially(async () => {
      if (this.tenants.has(id)) throw new ServiceError('TENANT_EXISTS', `a tenant "${id}" exists already`);
      this.checkKeyEnvs(id, change);
      const at = this.deps.clock.iso();
      const tenant: Tenant = { id, ...definedOf(change), createdAt: at, updatedAt: at };
      await this.write(tenant);
      return tenant;
    });
  }

  /** Replace the fields given (a quota left out of `quotas` is no limit). */
  change(id: string, change: TenantChange): Promise<Tenant> {
    return this.follow.serially(async () => {
      this.checkKeyEnvs(id, change);
      const tenant: Tenant = { ...this.require(id), ...definedOf(change), updatedAt: this.deps.clock.iso() };
      await this.write(tenant);
      return tenant;
    });
  }

  /**
   * Delete a tenant and revoke its keys: TENANT_NOT_EMPTY while it has live agents. The
   * cluster's list is asked first (it awaits); then, in the span that queues the deletion, this
   * instance is asked again (a root made here meanwhile) and the keys are refused from there on,
   * so no root of the tenant is made here after the check.
   */
  delete(id: string, caller: Caller | undefined): Promise<void> {
    const notEmpty = (): ServiceError => new ServiceError('TENANT_NOT_EMPTY', `tenant "${id}" has live agents; dispose of its roots first`);
    return this.follow.serially(async () => {
      this.require(id);
      if (await this.deps.hasLiveAgents(id, caller)) throw notEmpty();
      if (this.deps.hasLiveHere(id)) throw notEmpty();
      const revoked = [...this.keys.values()].filter((key) => key.tenantId === id);
      for (const key of revoked) {
        this.keys.delete(key.digest);
        this.deps.log.changeSettings({ op: 'delete', kind: 'tenant-key', name: key.keyId });
      }
      this.revocations.revoke(revoked.map((key) => key.keyId));
      this.deps.log.changeSettings({ op: 'delete', kind: 'tenant', name: id });
      await this.deps.log.durable();
      this.tenants.delete(id);
      this.deps.onChange?.(id);
    });
  }

  /** Make a key for a tenant: answered once, stored as its digest only. */
  createKey(tenantId: string): Promise<{ keyId: string; key: string; createdAt: string }> {
    return this.follow.serially(async () => {
      this.require(tenantId);
      const key = TENANT_KEY_PREFIX + randomBytes(32).toString('base64url');
      const stored: TenantKey = { keyId: `tk_${randomBytes(9).toString('base64url')}`, tenantId, digest: hexDigest(key), createdAt: this.deps.clock.iso() };
      this.deps.log.changeSettings({ op: 'put', setting: { kind: 'tenant-key', name: stored.keyId, value: stored, updatedAt: stored.createdAt } });
      await this.deps.log.durable();
      this.keys.set(stored.digest, stored);
      return { keyId: stored.keyId, key, createdAt: stored.createdAt };
    });
  }

  /** Revoke a key: refused here from the answer on, on every other instance within the follow bound. */
  revokeKey(tenantId: string, keyId: string): Promise<void> {
    return this.follow.serially(async () => {
      this.require(tenantId);
      const found = [...this.keys.values()].find((k) => k.keyId === keyId && k.tenantId === tenantId);
      if (found === undefined) throw new ServiceError('TENANT_KEY_NOT_FOUND', `tenant "${tenantId}" has no key "${keyId}"`);
      // Refused from now on, before the commit: a revocation that fails to commit is answered 5xx and may be sent again.
      this.keys.delete(found.digest);
      this.revocations.revoke([keyId]);
      this.deps.log.changeSettings({ op: 'delete', kind: 'tenant-key', name: keyId });
      await this.deps.log.durable();
    });
  }

  /** Follow the stored tenants and keys (never throws). */
  sync(): Promise<void> {
    return this.follow
      .serially(async () => {
        const [tenants, keys] = await Promise.all([this.deps.settings.list('tenant'), this.deps.settings.list('tenant-key')]);
        const changed = new Set<string>();
        const wanted = new Set(tenants.map((s) => s.name));
        for (const id of this.tenants.keys()) if (!wanted.has(id)) changed.add(id);
        for (const setting of tenants) {
          const tenant = setting.value as Tenant;
          if (this.tenants.get(setting.name)?.updatedAt !== tenant.updatedAt) changed.add(setting.name);
        }
        this.tenants.clear();
        for (const setting of tenants) this.tenants.set(setting.name, setting.value as Tenant);
        const before = [...this.keys.values()];
        this.keys.clear();
        for (const setting of keys) {
          const key = setting.value as TenantKey;
          if (this.tenants.has(key.tenantId)) this.keys.set(key.digest, key);
        }
        // Revoked on another instance (or its tenant deleted there): what is open with it here ends too.
        this.revocations.revoke(before.filter((key) => !this.keys.has(key.digest)).map((key) => key.keyId));
        for (const id of changed) this.deps.onChange?.(id);
      })
      .catch((error: unknown) => this.deps.logger.error({ err: error }, 'could not follow the stored tenants'));
  }

  private async write(tenant: Tenant): Promise<void> {
    this.deps.log.changeSettings({ op: 'put', setting: { kind: 'tenant', name: tenant.id, value: tenant, updatedAt: tenant.updatedAt } });
    await this.deps.log.durable();
    this.tenants.set(tenant.id, tenant);
    this.deps.onChange?.(tenant.id);
  }

  /** A model key variable is given to one tenant at most, and never one of the service's own settings. */
  private checkKeyEnvs(id: string, change: TenantChange): void {
    for (const name of change.modelKeyEnvs ?? []) {
      if (name.startsWith('AGENTFOREST_')) throw new ServiceError('VALIDATION', `modelKeyEnvs: "${name}" is one of the service's own settings, never lent`);
      const owner = this.keyOwner(name);
      if (owner !== undefined && owner !== id) throw new ServiceError('VALIDATION', `modelKeyEnvs: "${name}" is given to tenant "${owner}" already`);
    }
  }

  private require(id: string): Tenant {
    const tenant = this.tenants.get(id);
    if (tenant === undefined) throw new ServiceError('TENANT_NOT_FOUND', `no tenant has the id "${id}"`);
    return tenant;
  }
}

function hexDigest(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

function definedOf(change: TenantChange): TenantChange {
  return {
    ...(change.name === undefined ? {} : { name: change.name }),
    ...(change.quotas === undefined ? {} : { quotas: change.quotas }),
    ...(change.modelKeyEnvs === undefined ? {} : { modelKeyEnvs: change.modelKeyEnvs }),
  };
}
