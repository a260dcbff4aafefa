/**
 * Grants: which tools an agent may call. A grant is a tool name (`send_message`,
 * `mcp__files__read`, a declared backend tool) or a name ending in `*` that grants every tool
 * whose name starts with what precedes it (`mcp__files__*`, `mcp__files__read_*`). A package
 * name stands for its tools and is written as them.
 *
 * Agency only narrows down a tree: a tool is allowed to an agent when its own grants and every
 * ancestor's allow it, so taking a grant from an agent takes it from its descendants at once. A
 * child's grants are checked against its parent's chain when they are given (`uncovered`).
 *
 * `report` is not a grant: it reaches only the agent's own parent, so every continuable child
 * keeps it (as it survives a toolFilter).
 */
import { ServiceError } from './errors.js';
import { PACKAGE_NAMES, type PackageName } from './packages.js';

/** The tools of each service-owned package. */
export const PACKAGE_TOOLS: Readonly<Record<PackageName, readonly string[]>> = {
  subagent: ['spawn_subagent'],
  'subagent-control': ['send_message', 'list_agents', 'interrupt_agent'],
  'subagent-report': ['report'],
};

/** Every service-owned tool's name. */
export const SERVICE_TOOL_NAMES: ReadonlySet<string> = new Set(Object.values(PACKAGE_TOOLS).flat());

/** The tools that are never a grant (see the header). */
export const UNGRANTED_TOOLS: ReadonlySet<string> = new Set(['report']);

/** A root's grants when it is given none: the service-owned tools, as written (sorted). */
export const DEFAULT_GRANTS: readonly string[] = Object.freeze(
  PACKAGE_NAMES.flatMap((name) => PACKAGE_TOOLS[name])
    .filter((tool) => !UNGRANTED_TOOLS.has(tool))
    .sort(),
);

/** What a grant may look like: a tool name, optionally ending in `*`. */
export const GRANT_PATTERN = '^[A-Za-z0-9_.:-]{1,128}\\*?$|^\\*$';
const GRANT_RE = new RegExp(GRANT_PATTERN);

/** Whether one grant allows the tool `name`. */
export function grantAllows(grant: string, name: string): boolean {
  return grant.endsWith('*') ? name.startsWith(grant.slice(0, -1)) : grant === name;
}

/** Whether a set of grants allows the tool `name`. */
export function grantsAllow(grants: readonly string[], name: string): boolean {
  for (const grant of grants) if (grantAllows(grant, name)) return true;
  return false;
}

/** Whether `grant` gives nothing beyond what `grants` give (a wildcard is covered by a shorter or equal one). */
export function grantCovered(grants: readonly string[], grant: string): boolean {
  if (!grant.endsWith('*')) return grantsAllow(grants, grant);
  const prefix = grant.slice(0, -1);
  return grants.some((held) => held.endsWith('*') && prefix.startsWith(held.slice(0, -1)));
}

/**
 * Grants as written: package names replaced by their tools, duplicates and `report` dropped,
 * sorted. Returns the first malformed one as `invalid`.
 */
export function normalizeGrants(grants: readonly string[]): { grants: string[] } | { invalid: string } {
  const out = new Set<string>();
  for (const grant of grants) {
    if (!GRANT_RE.test(grant)) return { invalid: grant };
    const tools = (PACKAGE_TOOLS as Record<string, readonly string[] | undefined>)[grant] ?? [grant];
    for (const tool of tools) if (!UNGRANTED_TOOLS.has(tool)) out.add(tool);
  }
  return { grants: [...out].sort() };
}

/** `normalizeGrants`, refusing a malformed grant with 400 VALIDATION. */
export function grantsOrRefuse(grants: readonly string[]): string[] {
  const result = normalizeGrants(grants);
  if ('invalid' in result) throw new ServiceError('VALIDATION', `"${result.invalid}" is not a tool name or a name ending in *`);
  return result.grants;
}

/**
 * The first of `wanted` that some grant set of the chain does not cover (`chain`: the parent's
 * grants, then each ancestor's up to the root), or undefined when all are covered.
 */
export function uncovered(wanted: readonly string[], chain: Iterable<readonly string[]>): string | undefined {
  const sets = [...chain];
  return wanted.find((grant) => sets.some((held) => !grantCovered(held, grant)));
}
