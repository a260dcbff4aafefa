/**
 * The literal sets that describe agents. Each set is defined once here; TypeScript unions and
 * the HTTP schemas both derive from these tuples.
 */
export const AGENT_KINDS = ['root', 'child'] as const;
export type AgentKind = (typeof AGENT_KINDS)[number];

export const CHILD_MODES = ['continuable', 'one-shot'] as const;
export type ChildMode = (typeof CHILD_MODES)[number];

export const PROVIDERS = ['in-process', 'remote'] as const;
export type Provider = (typeof PROVIDERS)[number];

/**
 * Roots are idle|running|disposing; children idle|running while resident, settled or closed;
 * either is paused while it has a step to take that a budget stops (see budget.ts).
 */
export const AGENT_STATUSES = ['idle', 'running', 'paused', 'disposing', 'settled', 'closed'] as const;
export type AgentStatus = (typeof AGENT_STATUSES)[number];

export const DELIVERIES = ['followup', 'inject', 'steer'] as const;
export type Delivery = (typeof DELIVERIES)[number];

export const ACTIVATION_STATES = ['running', 'waiting'] as const;
export type ActivationState = (typeof ACTIVATION_STATES)[number];

/** Agent and session ids: what an operator may choose, and what the service mints. */
export const AGENT_ID_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$';
