/**
 * The service-owned tool packages and their configuration literals.
 */
export const PACKAGE_NAMES = ['subagent', 'subagent-control', 'subagent-report'] as const;
export type PackageName = (typeof PACKAGE_NAMES)[number];

/**
 * How a report reaches its parent: `quiet` as context (never a turn), `wakeup` as a later
 * turn, `next-step` into the next step of the parent's open turn (a later turn when none is open).
 */
export const REPORT_DELIVERIES = ['quiet', 'wakeup', 'next-step'] as const;
export type ReportDelivery = (typeof REPORT_DELIVERIES)[number];

/** Which turn ends of a continuable child put a notice in its parent: none, failed ones, every one. */
export const SETTLEMENT_NOTICE_MODES = ['off', 'failures', 'all'] as const;
export type SettlementNoticeMode = (typeof SETTLEMENT_NOTICE_MODES)[number];
