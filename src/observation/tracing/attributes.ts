/**
 * The attribute names the traces use, in one place. The GenAI ones follow the OpenTelemetry
 * GenAI semantic conventions (still incubating: @opentelemetry/semantic-conventions exports
 * them only from its `incubating` entry, whose names may change, so they are spelled here);
 * `error.type`, `server.*` are stable; `agentforest.*` are this service's own.
 */
export const ATTR = {
  operationName: 'gen_ai.operation.name',
  providerName: 'gen_ai.provider.name',
  agentId: 'gen_ai.agent.id',
  agentName: 'gen_ai.agent.name',
  conversationId: 'gen_ai.conversation.id',
  requestModel: 'gen_ai.request.model',
  responseModel: 'gen_ai.response.model',
  /** On a `chat` span: the primary model failed over, and a fallback answered (its name is gen_ai.response.model). */
  modelFallback: 'agentforest.model.fallback',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
  finishReasons: 'gen_ai.response.finish_reasons',
  inputMessages: 'gen_ai.input.messages',
  outputMessages: 'gen_ai.output.messages',
  toolName: 'gen_ai.tool.name',
  toolCallId: 'gen_ai.tool.call.id',
  toolType: 'gen_ai.tool.type',
  toolArguments: 'gen_ai.tool.call.arguments',
  toolResult: 'gen_ai.tool.call.result',
  errorType: 'error.type',
  serverAddress: 'server.address',
  serverPort: 'server.port',
  rootId: 'agentforest.root_id',
  parentId: 'agentforest.parent_id',
  turnId: 'agentforest.turn_id',
  turnEndReason: 'agentforest.turn.end_reason',
  stepId: 'agentforest.step_id',
  stepIndex: 'agentforest.step.index',
  stepAttempt: 'agentforest.step.attempt',
  /** On a span link: why the linked span led to this one (`report`). */
  linkCause: 'agentforest.link.cause',
  /** Which side runs a tool: `service` (the service's own tools) or `backend`. */
  toolOwner: 'agentforest.tool.owner',
} as const;

/** gen_ai.operation.name values. */
export const OPERATION = { invokeAgent: 'invoke_agent', chat: 'chat', executeTool: 'execute_tool' } as const;

/** error.type when nothing more specific is known (the conventions' fallback value). */
export const OTHER_ERROR = '_OTHER';
