/**
 * A registration as the operator sends it, checked and turned into what is stored: either a
 * URL (Streamable HTTP) or a command (stdio, where the deployment allows commands), and a
 * secret only as the name of a variable the model-key rule lends to that URL (never a value
 * read from the environment: that happens each time the server is reached).
 *
 * A tenant's registration (`tenantId`) is never a command: only an admin key may have the
 * service run a process on its host. Its URL's address is checked by its registry
 * (public-address.ts), which resolves it. Its secrets are checked again before every request
 * (`unlentSecret`): a variable lent to the tenant when it registered may be given to another
 * tenant, or taken back, since.
 */
import type { ToolServerBody } from '../../contract/index.js';
import { ServiceError } from '../../domain/errors.js';
import type { SecretValue, ToolServerConfig } from '../../domain/tool-servers.js';
import { checkLentSecret, keyLentTo, type ModelPolicy } from '../../driver/model-policy.js';

export interface ToolServerRules {
  /** stdio servers are allowed (AGENTFOREST_TOOL_SERVER_COMMANDS=on). */
  commands: boolean;
  policy: ModelPolicy;
}

/**
 * The stored form of a registration made for `tenantId` (undefined: global, an admin's), or
 * 400 VALIDATION saying what is wrong with it.
 */
export function checkToolServer(body: ToolServerBody, rules: ToolServerRules, tenantId: string | undefined): ToolServerConfig {
  const { url, command } = body;
  if ((url === undefined) === (command === undefined)) throw new ServiceError('VALIDATION', 'a tool server has either a url (Streamable HTTP) or a command (stdio)');
  const common: Omit<ToolServerConfig, 'transport'> = {
    ...(body.tools === undefined ? {} : { tools: [...new Set(body.tools)] }),
    ...(body.timeoutMs === undefined ? {} : { timeoutMs: body.timeoutMs }),
    ...(body.retryAfterCrash === undefined ? {} : { retryAfterCrash: body.retryAfterCrash }),
    ...(tenantId === undefined ? {} : { tenantId }),
  };
  if (command !== undefined) {
    if (tenantId !== undefined) {
      throw new ServiceError('VALIDATION', "a tenant's tool server has a url, never a command: only an admin key may have the service run a process (stdio)");
    }
    if (!rules.commands) throw new ServiceError('VALIDATION', 'stdio tool servers are off here (AGENTFOREST_TOOL_SERVER_COMMANDS=on allows them)');
    if (body.headers !== undefined) throw new ServiceError('VALIDATION', 'headers are for a tool server with a url');
    return {
      transport: 'stdio',
      command,
      ...(body.args === undefined ? {} : { args: [...body.args] }),
      ...(body.env === undefined ? {} : { env: secrets(body.env, undefined, 'env', rules.policy) }),
      ...common,
    };
  }
  if (body.args !== undefined || body.env !== undefined) throw new ServiceError('VALIDATION', 'args and env are for a tool server with a command');
  checkUrl(url!);
  return { transport: 'http', url: url!, ...(body.headers === undefined ? {} : { headers: secrets(body.headers, url, 'headers', rules.policy, tenantId) }), ...common };
}

function checkUrl(url: string): void {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ServiceError('VALIDATION', `url "${url}" is not a URL`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new ServiceError('VALIDATION', `url "${url}" must be an http or https URL`);
  if (parsed.username !== '' || parsed.password !== '') throw new ServiceError('VALIDATION', 'url must not carry credentials; name them in headers with {env}');
}

function secrets(values: Record<string, SecretValue>, url: string | undefined, field: string, policy: ModelPolicy, tenantId?: string): Record<string, SecretValue> {
  return Object.fromEntries(
    Object.entries(values).map(([key, value]) => {
      if (typeof value === 'string') return [key, value];
      checkLentSecret(value.env, url, policy, `${field}.${key}`, tenantId);
      return [key, { env: value.env }];
    }),
  );
}

/**
 * Why a request to a tenant's server may not carry the secrets its configuration names now
 * (registration's rule again: each variable still lent to the tenant, set, and the URL under
 * AGENTFOREST_MODEL_BASE_URLS when that is given), or undefined when it may. A global server's
 * secrets are the admin's to lend: undefined.
 */
export function unlentSecret(config: ToolServerConfig, policy: ModelPolicy): string | undefined {
  const { tenantId } = config;
  if (tenantId === undefined) return undefined;
  for (const [header, value] of Object.entries(config.headers ?? {})) {
    if (typeof value === 'string') continue;
    const field = `headers.${header}`;
    if (!keyLentTo(value.env, policy, tenantId)) return `${field} names "${value.env}", which is no longer lent to tenant "${tenantId}" (its modelKeyEnvs): the secret is not sent`;
    try {
      checkLentSecret(value.env, config.url, policy, field, tenantId);
    } catch (error) {
      if (error instanceof ServiceError) return `${error.message}: the secret is not sent`;
      throw error;
    }
  }
  return undefined;
}
