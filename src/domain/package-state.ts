/**
 * The whole package configuration as one value: which packages are installed and the options
 * of `subagent-report`. A change (install, reconfigure, uninstall) is a pure function from one
 * state to the next, so one process and a cluster sharing the state in its database compute it
 * the same way; the PackageManager makes the process match a state.
 */
import { ServiceError } from './errors.js';
import { PACKAGE_NAMES, REPORT_DELIVERIES, SETTLEMENT_NOTICE_MODES, type PackageName, type ReportDelivery, type SettlementNoticeMode } from './packages.js';

export interface PackageState {
  /** Installed packages, in PACKAGE_NAMES order. */
  installed: PackageName[];
  reportDelivery: ReportDelivery;
  settlementNotices: SettlementNoticeMode;
}

/** The options a PUT may set; only `subagent-report` takes any. */
export interface PackageOptions {
  reportDelivery?: ReportDelivery;
  settlementNotices?: SettlementNoticeMode;
}

/** A change to the state: install (or reconfigure) with options, or uninstall. */
export type PackageChange = { kind: 'install'; name: string; config: PackageOptions } | { kind: 'uninstall'; name: string };

/** The config keys only `subagent-report` takes. */
const REPORT_OPTIONS = ['reportDelivery', 'settlementNotices'] as const satisfies readonly (keyof PackageOptions)[];

/** The state after `change`; throws PACKAGE_NOT_FOUND or VALIDATION, leaving `state` as it was. */
export function changedState(state: PackageState, change: PackageChange): PackageState {
  const name = requirePackage(change.name);
  if (change.kind === 'uninstall') return { ...state, installed: state.installed.filter((p) => p !== name) };
  const { config } = change;
  if (name !== 'subagent-report') {
    const option = REPORT_OPTIONS.find((key) => config[key] !== undefined);
    if (option !== undefined) throw new ServiceError('VALIDATION', `package "${name}" takes no ${option}`);
  }
  return {
    installed: PACKAGE_NAMES.filter((p) => p === name || state.installed.includes(p)),
    reportDelivery: config.reportDelivery ?? state.reportDelivery,
    settlementNotices: config.settlementNotices ?? state.settlementNotices,
  };
}

/** Whether going from `before` to `after` takes `report` away from resident children. */
export function revokesReport(before: PackageState, after: PackageState): boolean {
  return before.installed.includes('subagent-report') && !after.installed.includes('subagent-report');
}

export function requirePackage(name: string): PackageName {
  if (!(PACKAGE_NAMES as readonly string[]).includes(name)) {
    throw new ServiceError('PACKAGE_NOT_FOUND', `unknown package "${name}"; known: ${PACKAGE_NAMES.join(', ')}`);
  }
  return name as PackageName;
}

/**
 * A state read back from storage, checked: unknown package names (from a newer build) are left
 * out, an unknown option value is an error naming it.
 */
export function parsePackageState(value: unknown): PackageState {
  const raw = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>;
  const installed = Array.isArray(raw.installed) ? raw.installed.filter((n): n is string => typeof n === 'string') : [];
  const oneOf = <T extends string>(values: readonly T[], field: string): T => {
    const v = raw[field];
    if (typeof v === 'string' && (values as readonly string[]).includes(v)) return v as T;
    throw new Error(`the stored package state has an unknown ${field}: ${JSON.stringify(v)}`);
  };
  return {
    installed: PACKAGE_NAMES.filter((p) => installed.includes(p)),
    reportDelivery: oneOf(REPORT_DELIVERIES, 'reportDelivery'),
    settlementNotices: oneOf(SETTLEMENT_NOTICE_MODES, 'settlementNotices'),
  };
}
