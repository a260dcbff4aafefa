/**
 * The wire contract: every shape the API shows that more than one place uses, written once in
 * TypeBox. Routes validate and document with these schemas; the services and the tests use
 * their `Static<>` types instead of restating them. A schema shared between operations has an
 * `$id`: the app adds those with `addSchema`, operations refer to them with `$ref`, and the
 * OpenAPI document lists them under `components.schemas` by that name. A schema one operation
 * answers with (a receipt, a session page) has no `$id` and stays inline in the document.
 * ./checks.ts fails the build when a schema drifts from the domain type it shows.
 *
 * This layer imports only TypeBox and the domain (its literal tuples; its types in ./checks.ts).
 */
import type { TSchema } from '@sinclair/typebox';
import { AgentView, Budget, BudgetView, Content, Credential, ErrorBody, ModelSpec, TextBlock, TokenUsage, ToolCallErrorBody, Usage } from './common.js';
import { GRANT_SCHEMAS } from './grants.js';
import { BACKEND_TOOL_SCHEMAS, TOOL_SERVER_SCHEMAS } from './external-tools.js';
import { APPROVAL_SCHEMAS } from './approvals.js';
import { PACKAGE_SCHEMAS } from './packages.js';
import { SESSION_SCHEMAS } from './sessions.js';
import { STEP_SCHEMAS } from './steps.js';

export * from './common.js';
export * from './grants.js';
export * from './external-tools.js';
export * from './approvals.js';
export * from './packages.js';
export * from './receipts.js';
export * from './sessions.js';
export * from './steps.js';
export * from './webhooks.js';
export { exactInteger, exactNumber, literals, ref } from './schema.js';

/** Every shared schema, each after the ones it refers to. */
export const CONTRACT_SCHEMAS: readonly (TSchema & { $id: string })[] = [
  TextBlock,
  Content,
  ModelSpec,
  TokenUsage,
  Budget,
  Usage,
  BudgetView,
  AgentView,
  Credential,
  ErrorBody,
  ToolCallErrorBody,
  ...APPROVAL_SCHEMAS,
  ...SESSION_SCHEMAS,
  ...STEP_SCHEMAS,
  ...PACKAGE_SCHEMAS,
  ...GRANT_SCHEMAS,
  ...TOOL_SERVER_SCHEMAS,
  ...BACKEND_TOOL_SCHEMAS,
];
