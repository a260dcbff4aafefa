/**
 * The installed service-owned tool packages and their configuration, changed at runtime
 * through /v1/packages. Global tools appear and vanish for every agent at once; the report
 * contribution follows the setup registry's rules (grants wait for the next Activation,
 * revocation is immediate). The settlement-notice mode of `subagent-report` is read at each
 * turn end (continuation/settlement-notices.ts), so a change, and the package's removal, apply
 * at once.
 */
import type { PackageConfig, PackageView } from '../../contract/index.js';
import { ServiceError } from '../../domain/errors.js';
import { PACKAGE_NAMES, type PackageName, type ReportDelivery, type SettlementNoticeMode } from '../../domain/packages.js';
import type { ContinuationManager } from '../continuation/continuation-manager.js';
import type { ActivationSetupRegistry } from '../continuation/setup-registry.js';
import type { AgentScope } from '../live-agent.js';
import type { ToolRegistry } from '../tool-registry.js';
import { controlTools, type ControlDeps } from './subagent-control.js';
import { reportTool } from './subagent-report.js';
import { spawnSubagentTool } from './subagent.js';

export interface PackageManagerDeps {
  tools: ToolRegistry;
  setup: ActivationSetupRegistry<AgentScope>;
  manager: ContinuationManager;
  control: Omit<ControlDeps, 'manager'>;
}

export class PackageManager {
  private readonly installed = new Map<PackageName, () => void>();
  private reportDelivery: ReportDelivery;
  private settlementNotices: SettlementNoticeMode;
  private readonly maxReportBytes: number | undefined;
  private readonly modelGrants: boolean;

  constructor(
    private readonly deps: PackageManagerDeps,
    initial: {
      packages?: readonly string[] | undefined;
      reportDelivery: ReportDelivery;
      settlementNotices?: SettlementNoticeMode;
      maxReportBytes?: number;
      /** spawn_subagent's input takes a `budget` grant from the model. */
      modelGrants?: boolean;
    },
  ) {
    this.maxReportBytes = initial.maxReportBytes;
    this.modelGrants = initial.modelGrants ?? false;
    this.reportDelivery = initial.reportDelivery;
    this.settlementNotices = initial.settlementNotices ?? 'off';
    for (const name of initial.packages ?? PACKAGE_NAMES) this.install(name, {});
  }

  list(): PackageView[] {
    return PACKAGE_NAMES.map((name) => this.view(name));
  }

  view(name: PackageName): PackageView {
    return { name, installed: this.installed.has(name), config: this.configOf(name) };
  }

  /**
   * Install, or reconfigure an installed package. `reportDelivery` applies to the next
   * Activation; `settlementNotices` to the next turn end.
   */
  install(name: string, config: PackageConfig): PackageView {
    const pkg = requirePackage(name);
    if (pkg !== 'subagent-report') {
      const option = REPORT_OPTIONS.find((key) => config[key] !== undefined);
      if (option !== undefined) throw new ServiceError('VALIDATION', `package "${pkg}" takes no ${option}`);
    }
    if (config.reportDelivery !== undefined) this.reportDelivery = config.reportDelivery;
    if (config.settlementNotices !== undefined) this.settlementNotices = config.settlementNotices;
    if (!this.installed.has(pkg)) this.installed.set(pkg, this.activate(pkg));
    return this.view(pkg);
  }

  /** The settlement-notice mode in force now: `off` while `subagent-report` is not installed. */
  settlementNoticesInForce(): SettlementNoticeMode {
    return this.installed.has('subagent-report') ? this.settlementNotices : 'off';
  }

  /** Uninstall; a child-scoped tool is revoked from resident children at once. */
  uninstall(name: string): PackageView {
    const pkg = requirePackage(name);
    const teardown = this.installed.get(pkg);
    this.installed.delete(pkg);
    teardown?.();
    return this.view(pkg);
  }

  private activate(name: PackageName): () => void {
    switch (name) {
      case 'subagent':
        return this.deps.tools.register(spawnSubagentTool(this.deps.manager, { modelGrants: this.modelGrants }));
      case 'subagent-control': {
        const disposers = controlTools({ manager: this.deps.manager, ...this.deps.control }).map((tool) => this.deps.tools.register(tool));
        return () => disposers.forEach((dispose) => dispose());
      }
      case 'subagent-report':
        return this.deps.setup.register((scope) => {
          // The mode is read per Activation: a reconfiguration applies to the next one.
          scope.tools.set('report', reportTool(this.deps.manager, this.reportDelivery, this.maxReportBytes));
          return () => {
            scope.tools.delete('report');
          };
        });
    }
  }

  private configOf(name: PackageName): PackageConfig {
    return name === 'subagent-report' ? { reportDelivery: this.reportDelivery, settlementNotices: this.settlementNotices } : {};
  }
}

/** The config keys only `subagent-report` takes. */
const REPORT_OPTIONS = ['reportDelivery', 'settlementNotices'] as const satisfies readonly (keyof PackageConfig)[];

function requirePackage(name: string): PackageName {
  if (!(PACKAGE_NAMES as readonly string[]).includes(name)) {
    throw new ServiceError('PACKAGE_NOT_FOUND', `unknown package "${name}"; known: ${PACKAGE_NAMES.join(', ')}`);
  }
  return name as PackageName;
}
