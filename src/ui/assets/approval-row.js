/**
 * One approval waiting for a person, as a row of the forest page's approvals panel: the path of
 * the agent that asked, the tool, the call's input as JSON, how long it has waited, and Approve
 * / Deny with an optional reason. A decision is posted once with the operator key
 * (POST /v1/approvals/{id}/decision); a refusal (APPROVAL_DECIDED when it ended meanwhile) is
 * shown on the row. Every string from the API is set as text.
 */
import { errorText, postJson } from './api.js';
import { el, setText } from './dom.js';
import { clock, waitedText } from './format.js';

/** The longest reason the service takes. */
const REASON_MAX = 2000;
/** Refusals that deciding again cannot change. */
const FINAL = new Set(['APPROVAL_DECIDED', 'APPROVAL_NOT_FOUND']);

export class ApprovalRow {
  /**
   * @param {any} approval an Approval, pending
   * @param {{ onEnded: (approval: any) => void, onSelect: (agentId: string) => void }} hooks
   *   onEnded: the service answered a decision posted here with the approval, now ended
   */
  constructor(approval, hooks) {
    this.approval = approval;
    this.hooks = hooks;
    this.age = el('time', { class: 'approval-age', datetime: approval.requestedAt, title: `Asked at ${clock(approval.requestedAt)}` });
    this.reason = el('input', { type: 'text', class: 'approval-reason', name: 'reason', maxlength: REASON_MAX, placeholder: 'Reason (optional)', 'aria-label': 'Reason (optional)', autocomplete: 'off' });
    this.approve = el('button', { type: 'button', class: 'approve', text: 'Approve', onclick: () => void this.decide('approve') });
    this.deny = el('button', { type: 'button', class: 'deny', text: 'Deny', onclick: () => void this.decide('deny') });
    this.error = el('p', { class: 'approval-error', role: 'alert' });
    const path = el('button', {
      type: 'button',
      class: 'approval-path link',
      title: `Read the session of ${approval.agentId}`,
      text: approval.path.join(' / '),
      onclick: () => hooks.onSelect(approval.agentId),
    });
    this.li = el(
      'li',
      { class: 'approval', dataset: { approvalId: approval.id, agentId: approval.agentId } },
      el('div', { class: 'approval-head' }, path, el('span', { class: 'approval-tool', text: approval.tool }), this.age),
      el('pre', { class: 'approval-input', text: inputText(approval.input) }),
      el('div', { class: 'approval-actions' }, this.reason, this.approve, this.deny),
      this.error,
    );
  }

  /** @param {number} now the service's time, in ms */
  tick(now) {
    setText(this.age, `waiting ${waitedText(now - Date.parse(this.approval.requestedAt))}`);
  }

  /**
   * @private
   * @param {'approve' | 'deny'} decision
   */
  async decide(decision) {
    this.setBusy(true);
    setText(this.error, '');
    const reason = this.reason.value.trim();
    let answer;
    try {
      answer = await postJson(`/v1/approvals/${encodeURIComponent(this.approval.id)}/decision`, reason === '' ? { decision } : { decision, reason });
    } catch (failure) {
      setText(this.error, `Not ${decision === 'approve' ? 'approved' : 'denied'}: ${errorText(failure)}`);
      // Ended meanwhile (or gone): asking again cannot help; the stream's news will remove it.
      this.setBusy(FINAL.has(failure?.code));
      return;
    }
    if (answer?.state === 'pending') this.setBusy(false);
    else this.hooks.onEnded(answer);
  }

  /** @private */
  setBusy(busy) {
    this.approve.disabled = busy;
    this.deny.disabled = busy;
    this.reason.disabled = busy;
  }
}

/** The call's input as indented JSON (a string input as it is). */
function inputText(input) {
  if (typeof input === 'string') return input;
  return JSON.stringify(input, null, 2) ?? String(input);
}
