/**
 * The installed service-owned tool packages and their configuration, changed at runtime
 * through /v1/packages. Global tools appear and vanish for every agent at once; the report
 * contribution follows the setup registry's rules (grants wait for the next Activation,
 * revocation is immediate). The settlement-notice mode of `subagent-report` is read at each
 * turn end (src/children/settlement-notices.ts), so a change, and the package's removal, apply
 * at once.
 */
import type { PackageConfig, PackageView } from '../../contract/index.js';
import { changedState, requirePackage, type PackageState } from '../../domain/package-state.js';
import { PACKAGE_NAMES, type PackageName, type ReportDelivery, type SettlementNoticeMode } from '../../domain/packages.js';
import type { ChildLifecycle } from '../../children/child-lifecycle.js';
import type { ReportRule } from '../../children/report-rule.js';
import type { ActivationSetupRegistry } from '../../children/setup-registry.js';
import type { AgentScope } from '../../agents/live-agent.js';
import type { ToolRegistry } from '../tool-registry.js';
import { controlTools, type ControlDeps } from './subagent-control.js';
import { reportTool } from './subagent-report.js';
import { spawnSubagentTool } from './subagent.js';

export interface PackageManagerDeps {
  tools: ToolRegistry;
  setup: ActivationSetupRegistry<AgentScope>;
  children: Pick<ChildLifecycle, 'startChild' | 'deliverToChild'>;
  reports: Pick<ReportRule, 'reportFrom'>;
  control: Omit<ControlDeps, 'children'>;
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

  /** The whole configuration now, as a state (see domain/package-state.ts). */
  state(): PackageState {
    return {
      installed: PACKAGE_NAMES.filter((name) => this.installed.has(name)),
      reportDelivery: this.reportDelivery,
      settlementNotices: this.settlementNotices,
    };
  }

  /**
   * Install, or reconfigure an installed package. `reportDelivery` applies to the next
   * Activation; `settlementNotices` to the next turn end.
   */
  install(name: string, config: PackageConfig): PackageView {
    const pkg = requirePackage(name);
    this.apply(changedState(this.state(), { kind: 'install', name: pkg, config }));
    return this.view(pkg);
  }

  /** The settlement-notice mode in force now: `off` while `subagent-report` is not installed. */
  settlementNoticesInForce(): SettlementNoticeMode {
    return this.installed.has('subagent-report') ? this.settlementNotices : 'off';
  }

  /** Uninstall; a child-scoped tool is revoked from resident children at once. */
  uninstall(name: string): PackageView {
    const pkg = requirePackage(name);
    this.apply(changedState(this.state(), { kind: 'uninstall', name: pkg }));
    return this.view(pkg);
  }

  /**
   * Make this process match `state`, idempotently: install what it names and is missing,
   * uninstall what it does not name, take its options. Every part is applied even when a
   * teardown throws; the first such error is thrown after.
   */
  apply(state: PackageState): void {
    this.reportDelivery = state.reportDelivery;
    this.settlementNotices = state.settlementNotices;
    let failure: { error: unknown } | undefined;
    for (const name of PACKAGE_NAMES) {
      const wanted = state.installed.includes(name);
      if (wanted && !this.installed.has(name)) this.installed.set(name, this.activate(name));
      const teardown = this.installed.get(name);
      if (wanted || teardown === undefined) continue;
      this.installed.delete(name);
      try {
        teardown();
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure !== undefined) throw failure.error;
  }

  private activate(name: PackageName): () => void {
    switch (name) {
      case 'subagent':
        return this.deps.tools.register(spawnSubagentTool(this.deps.children, { modelGrants: this.modelGrants }));
      case 'subagent-control': {
        const disposers = controlTools({ children: this.deps.children, ...this.deps.control }).map((tool) => this.deps.tools.register(tool));
        return () => disposers.forEach((dispose) => dispose());
      }
      case 'subagent-report':
        return this.deps.setup.register((scope) => {
          // The mode is read per Activation: a reconfiguration applies to the next one.
          scope.tools.set('report', reportTool(this.deps.reports, this.reportDelivery, this.maxReportBytes));
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
