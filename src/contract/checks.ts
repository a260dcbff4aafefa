/**
 * Compile-time checks that the wire contract and the domain do not drift. Where the domain
 * defines a shape the API shows, the schema's `Static<>` type must equal the domain's type;
 * where the wire is deliberately looser than the domain (a free string where the domain has a
 * union, a message source as one object where the domain has a discriminated union), every
 * domain value must still be a valid wire value. Nothing here runs: a drift fails `tsc`.
 */
import type { Static } from '@sinclair/typebox';
import type { ChatMessage as DomainChatMessage, ChatTool as DomainChatTool } from '../domain/step-render.js';
import type { MessageSource as DomainMessageSource, TextBlock as DomainTextBlock, ToolCall as DomainToolCall } from '../domain/message.js';
import type { Budget as DomainBudget, Usage as DomainUsage } from '../domain/budget.js';
import type { ModelSpec as DomainModelSpec, TokenUsage as DomainTokenUsage } from '../domain/model.js';
import type { SessionEntry as DomainSessionEntry, SessionHeader as DomainSessionHeader } from '../domain/session.js';
import type { Approval as DomainApproval } from '../domain/approvals.js';
import type { Approval } from './approvals.js';
import type { Budget, ModelSpec, TextBlock, TokenUsage, Usage } from './common.js';
import type { ActivationEntry, ApprovalEntry, BudgetEntry, CompactionEntry, GrantsEntry, MessageEntry, MessageSource, SessionEntry, SessionHeader, StepStartEntry, ToolCall, ToolStartedEntry, TurnEndEntry, TurnStartEntry } from './sessions.js';
import type { ChatMessage, ChatTool } from './steps.js';

/** True when A and B are the same type (not merely assignable both ways). */
type Equals<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
/** True when every A is a B. */
type Fits<A, B> = [A] extends [B] ? true : false;
type Assert<T extends true> = T;

/** An entry variant of the domain, its intersection flattened into one object type. */
type EntryOf<T extends DomainSessionEntry['type']> = Flat<Extract<DomainSessionEntry, { type: T }>>;
type Flat<T> = { [K in keyof T]: T[K] };

export type ContractChecks = [
  Assert<Equals<Static<typeof TextBlock>, DomainTextBlock>>,
  Assert<Equals<Static<typeof ToolCall>, DomainToolCall>>,
  Assert<Equals<Static<typeof TokenUsage>, DomainTokenUsage>>,
  Assert<Equals<Static<typeof ModelSpec>, DomainModelSpec>>,
  Assert<Equals<Static<typeof ChatMessage>, DomainChatMessage>>,
  Assert<Equals<Static<typeof ChatTool>, DomainChatTool>>,
  Assert<Equals<Static<typeof TurnStartEntry>, EntryOf<'turn-start'>>>,
  Assert<Equals<Static<typeof StepStartEntry>, EntryOf<'step-start'>>>,
  Assert<Equals<Static<typeof TurnEndEntry>, EntryOf<'turn-end'>>>,
  Assert<Equals<Static<typeof ActivationEntry>, EntryOf<'activation'>>>,
  Assert<Equals<Static<typeof CompactionEntry>, EntryOf<'compaction'>>>,
  Assert<Equals<Static<typeof BudgetEntry>, EntryOf<'budget'>>>,
  Assert<Equals<Static<typeof GrantsEntry>, EntryOf<'grants'>>>,
  Assert<Equals<Static<typeof ToolStartedEntry>, EntryOf<'tool-started'>>>,
  Assert<Equals<Static<typeof ApprovalEntry>, EntryOf<'approval'>>>,
  Assert<Equals<Static<typeof Approval>, DomainApproval>>,
  Assert<Equals<Static<typeof Budget>, DomainBudget>>,
  Assert<Equals<Static<typeof Usage>, DomainUsage>>,
  // The wire's message source is one object with an optional sender; the domain's is a union.
  Assert<Fits<DomainMessageSource, Static<typeof MessageSource>>>,
  Assert<Fits<EntryOf<'message'>, Static<typeof MessageEntry>>>,
  Assert<Fits<DomainSessionEntry, Static<typeof SessionEntry>>>,
  // The wire's header names kind, mode and provider as free strings.
  Assert<Fits<DomainSessionHeader, Static<typeof SessionHeader>>>,
];
