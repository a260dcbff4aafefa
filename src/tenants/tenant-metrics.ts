/**
 * The tenants' figures in the Prometheus text format: live agents and what was spent in the
 * current windows, per tenant (as this instance knows them: its own and the other instances'
 * last published). An admin's `/metrics` carries every tenant's after the service's own series;
 * a tenant key's carries its own tenant's alone.
 */
import type { Spent } from './usage-windows.js';

export type TenantFigures = { liveAgents: number; liveRoots: number } & Spent;

const GAUGES: readonly { name: string; help: string; of: (f: TenantFigures) => number }[] = [
  { name: 'agentforest_tenant_live_agents', help: 'Live agents of the tenant (roots and resident children).', of: (f) => f.liveAgents },
  { name: 'agentforest_tenant_live_roots', help: 'Live roots of the tenant.', of: (f) => f.liveRoots },
  { name: 'agentforest_tenant_steps_this_minute', help: 'Steps handed out to the tenant in the current UTC minute.', of: (f) => f.steps },
  { name: 'agentforest_tenant_tokens_today', help: 'Model tokens the tenant spent in the current UTC day.', of: (f) => f.tokens },
  { name: 'agentforest_tenant_cost_micro_usd_today', help: 'What the tenant spent in the current UTC day, in millionths of a US dollar.', of: (f) => f.costMicroUsd },
];

/** Tenant ids are lowercase letters, digits and `-`: a label value as is. */
export function tenantMetricsText(tenants: readonly { id: string; figures: TenantFigures }[]): string {
  if (tenants.length === 0) return '';
  return GAUGES.map((g) => [`# HELP ${g.name} ${g.help}`, `# TYPE ${g.name} gauge`, ...tenants.map((t) => `${g.name}{tenant="${t.id}"} ${g.of(t.figures)}`)].join('\n')).join('\n') + '\n';
}
