/**
 * What a `model` given at creation may name. Anyone who may create an agent chooses where its
 * model requests go; the API key is the service's, so which environment variables may serve
 * as keys, and (optionally) which endpoints may receive them, is the operator's decision.
 */
import { ServiceError } from '../domain/errors.js';
import type { ModelSpec } from '../domain/model.js';

export interface ModelPolicy {
  /** Variables that may be named as `apiKeyEnv`; default: names ending in `_API_KEY`, except AGENTFOREST_*. */
  keyEnvs?: readonly string[] | undefined;
  /** URL prefixes a `baseUrl` must start with; default: any http(s) URL. */
  baseUrls?: readonly string[] | undefined;
  /** Where keys are read (the process environment). */
  env: Readonly<Record<string, string | undefined>>;
  /** The tenant a variable is given to (its modelKeyEnvs): only that tenant's agents may name it. */
  keyOwner?: (name: string) => string | undefined;
}

export function keyEnvAllowed(name: string, policy: ModelPolicy): boolean {
  if (policy.keyEnvs !== undefined) return policy.keyEnvs.includes(name);
  return /_API_KEY$/.test(name) && !name.startsWith('AGENTFOREST_');
}

/** Whether an agent of `tenantId` (undefined: an admin's) may name the variable `name` as its model key. */
export function keyLentTo(name: string, policy: ModelPolicy, tenantId: string | undefined): boolean {
  const owner = policy.keyOwner?.(name);
  if (owner !== undefined) return owner === tenantId;
  if (!keyEnvAllowed(name, policy)) return false;
  // The deployment's own keys go to a tenant's agent only where they reach the operator's endpoints alone.
  return tenantId === undefined || policy.baseUrls !== undefined;
}

/**
 * Throws VALIDATION, naming the field, unless this model may be used by an agent of `tenantId`
 * (undefined: an admin's). Returns the model with its base URL normalised (dot segments
 * resolved, no trailing slash): the form requests use.
 *
 * A variable given to a tenant (its modelKeyEnvs) is that tenant's agents' alone. A tenant's
 * agent may name the deployment's own keys only where AGENTFOREST_MODEL_BASE_URLS keeps them
 * to the operator's endpoints: otherwise a tenant could send them to a server of its own.
 */
export function checkModel(spec: ModelSpec, policy: ModelPolicy, tenantId?: string): ModelSpec {
  const baseUrl = checkEndpoint(spec, policy, tenantId, 'model');
  // A fallback is checked as it will be called: with what it inherits from the primary.
  const fallbacks = spec.fallbacks?.map((fallback, i) => {
    const inherited = { baseUrl: fallback.baseUrl ?? spec.baseUrl, apiKeyEnv: fallback.apiKeyEnv ?? spec.apiKeyEnv };
    const url = checkEndpoint(inherited, policy, tenantId, `model.fallbacks[${i}]`);
    return { ...fallback, ...(fallback.baseUrl === undefined ? {} : { baseUrl: url }) };
  });
  return { ...spec, baseUrl, ...(fallbacks === undefined ? {} : { fallbacks }) };
}

/** Throws VALIDATION, naming `field`, unless this endpoint and key may be used; its base URL normalised. */
function checkEndpoint(endpoint: { baseUrl: string; apiKeyEnv?: string | undefined }, policy: ModelPolicy, tenantId: string | undefined, field: string): string {
  const url = parseBaseUrl(endpoint.baseUrl, `${field}.baseUrl`);
  if (policy.baseUrls !== undefined && !policy.baseUrls.some((prefix) => underPrefix(url, parseBaseUrl(prefix, 'AGENTFOREST_MODEL_BASE_URLS')))) {
    throw new ServiceError('VALIDATION', `${field}.baseUrl "${endpoint.baseUrl}" is not one of the endpoints this service may call (AGENTFOREST_MODEL_BASE_URLS)`);
  }
  const name = endpoint.apiKeyEnv;
  if (name !== undefined) {
    if (tenantId !== undefined && !keyLentTo(name, policy, tenantId)) {
      throw new ServiceError('VALIDATION', `${field}.apiKeyEnv "${name}" is not a model key tenant "${tenantId}" may name (the tenant's modelKeyEnvs)`);
    }
    if (tenantId === undefined && !keyLentTo(name, policy, undefined)) {
      throw new ServiceError(
        'VALIDATION',
        `${field}.apiKeyEnv "${name}" is not a variable this service lends as an API key (AGENTFOREST_MODEL_KEY_ENVS; by default names ending in _API_KEY)`,
      );
    }
    if ((policy.env[name] ?? '') === '') throw new ServiceError('VALIDATION', `${field}.apiKeyEnv "${name}" is not set in the service's environment`);
  }
  return normalised(url);
}

/**
 * Throws VALIDATION, naming the field, unless the variable `name` may be lent as a secret to
 * `url` (a tool server's, say): the same rule as a model's key — an allowed variable, set, and
 * the URL under AGENTFOREST_MODEL_BASE_URLS when that is given. `url` undefined: a local process.
 * A tenant's server (`tenantId`) names only what the tenant's agents may name as model keys.
 */
export function checkLentSecret(name: string, url: string | undefined, policy: ModelPolicy, field: string, tenantId?: string): void {
  if (!keyLentTo(name, policy, tenantId)) {
    throw new ServiceError('VALIDATION', `${field} names "${name}", which is not a variable this service lends (AGENTFOREST_MODEL_KEY_ENVS; by default names ending in _API_KEY)`);
  }
  if ((policy.env[name] ?? '') === '') throw new ServiceError('VALIDATION', `${field} names "${name}", which is not set in the service's environment`);
  if (url === undefined || policy.baseUrls === undefined) return;
  const target = parseBaseUrl(url, field);
  if (!policy.baseUrls.some((prefix) => underPrefix(target, parseBaseUrl(prefix, 'AGENTFOREST_MODEL_BASE_URLS')))) {
    throw new ServiceError('VALIDATION', `${field}: "${url}" is not one of the endpoints this service lends secrets to (AGENTFOREST_MODEL_BASE_URLS)`);
  }
}

/** An http(s) URL with no credentials, query or fragment (not even an empty `?` or `#`). */
export function parseBaseUrl(text: string, field: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ServiceError('VALIDATION', `${field} "${text}" is not a URL`);
  }
  // Credentials, queries and fragments may hold secrets: those are refused without echoing the text.
  if (url.username !== '' || url.password !== '' || text.includes('?') || text.includes('#')) {
    throw new ServiceError('VALIDATION', `${field} must not carry credentials, a query or a fragment; name the key with model.apiKeyEnv`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ServiceError('VALIDATION', `${field} "${text}" must be an http or https URL`);
  // An encoded slash or backslash survives normalisation here and may be decoded (and `..`
  // resolved) by a gateway: the path would escape the prefix it was checked against.
  if (/%2f|%5c/i.test(url.pathname)) throw new ServiceError('VALIDATION', `${field} "${text}" must not contain an encoded slash or backslash`);
  return url;
}

/** Same origin, and the path equal to the prefix's or below it (whole segments only). */
function underPrefix(url: URL, prefix: URL): boolean {
  if (url.origin !== prefix.origin) return false;
  const base = prefix.pathname.replace(/\/+$/, '');
  const path = url.pathname.replace(/\/+$/, '');
  return path === base || path.startsWith(`${base}/`);
}

/** A base URL as requests use it (dot segments resolved, no trailing slash); throws VALIDATION naming `field`. */
export function normalisedBaseUrl(text: string, field: string): string {
  return normalised(parseBaseUrl(text, field));
}

function normalised(url: URL): string {
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}
