/**
 * Package `subagent-report`: the child-scoped `report` tool. It is not a global tool: the
 * package registers a setup contribution that installs `report` into each continuable
 * in-process child's own scope (after its toolFilter), so roots, one-shot and remote children
 * never see or run it. The delivery mode is read when an Activation is set up, so a change
 * applies to the next Activation; removing the package revokes `report` from resident
 * children at once.
 */
import { Type } from '@sinclair/typebox';
import { ServiceError } from '../../domain/errors.js';
import type { ReportDelivery } from '../../domain/packages.js';
import type { ReportRule } from '../../children/report-rule.js';
import { defineTool, toolInput } from '../define-tool.js';
import { DEFAULT_LIMITS } from '../../agents/limits.js';
import type { ServiceTool } from '../tool-registry.js';

export const REPORT_DESCRIPTION =
  'Report selected content to the agent that started you. Call this zero or more times for progress, findings, or a ' +
  'final answer. Reporting does not end your turn or finish your work, and only your direct parent receives it. A ' +
  'failed call may still have arrived, so do not blindly repeat it.';

export const REPORT_OUTPUT_DESCRIPTION = 'Self-contained content for your parent; it does not see your private work.';

const ReportInput = toolInput(Type.Object({ output: Type.String({ description: REPORT_OUTPUT_DESCRIPTION }) }, { additionalProperties: false }));

/** The `report` tool of one Activation (built for each; its input was compiled once, above). */
export function reportTool(reports: Pick<ReportRule, 'reportFrom'>, delivery: ReportDelivery, maxBytes: number = DEFAULT_LIMITS.reportBytes): ServiceTool {
  return defineTool({
    name: 'report',
    description: REPORT_DESCRIPTION,
    input: ReportInput,
    inScope: () => true,
    execute(input, { agent, signal, accepted }) {
      const bytes = Buffer.byteLength(input.output, 'utf8');
      if (bytes > maxBytes) {
        throw new ServiceError('PAYLOAD_TOO_LARGE', `report output is ${bytes} bytes; the limit is ${maxBytes}. Report a shorter summary; the report was not delivered`);
      }
      const messageId = reports.reportFrom(agent, input.output, delivery, signal);
      const outcome = { output: { messageId }, content: `report accepted by the agent that started you as message ${messageId}` };
      accepted?.(outcome);
      return outcome;
    },
  });
}
