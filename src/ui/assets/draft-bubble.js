/**
 * A draft (deltas.js) as a block under the transcript: the assistant's text as far as it is
 * written, each tool call's name and its arguments growing, marked as still being written and,
 * when pieces were missed, saying so. One block per step attempt: it is updated in place as
 * the draft grows, and another attempt's draft gets a block of its own. Text stays text.
 */
import { el, replaceChildren, setText } from './dom.js';

export class DraftBubble {
  /** @param {import('./deltas.js').Draft} draft */
  constructor(draft) {
    this.key = draft.key;
    this.text = el('div', { class: 'text' });
    this.calls = el('div', { class: 'draft-calls' });
    /** @type {{ name: HTMLElement, args: HTMLElement }[]} by position in draft.calls */
    this.callNodes = [];
    this.note = el('div', { class: 'draft-note', hidden: true, text: 'Some pieces were missed here; the whole answer shows once it is recorded.' });
    this.element = el(
      'li',
      { class: 'draft role-assistant', dataset: { agentId: draft.agentId, stepId: draft.stepId, attempt: String(draft.attempt) } },
      el('div', { class: 'who' }, el('span', { class: 'role', text: 'Assistant' }), el('span', { class: 'writing', text: 'writing…' })),
      this.text,
      this.calls,
      this.note,
    );
    this.update(draft);
  }

  /** @param {import('./deltas.js').Draft} draft the same attempt's, grown */
  update(draft) {
    setText(this.text, draft.text);
    this.text.hidden = draft.text === '';
    if (draft.calls.length !== this.callNodes.length) this.rebuildCalls(draft.calls.length);
    draft.calls.forEach((call, i) => {
      setText(this.callNodes[i].name, `→ ${call.name === '' ? '…' : call.name}`);
      setText(this.callNodes[i].args, call.args);
    });
    this.note.hidden = !draft.incomplete;
  }

  /** @private */
  rebuildCalls(count) {
    this.callNodes = Array.from({ length: count }, () => ({ name: el('div', { class: 'tool-name' }), args: el('pre', { class: 'args' }) }));
    replaceChildren(this.calls, ...this.callNodes.map((nodes) => el('div', { class: 'tool-call' }, nodes.name, nodes.args)));
  }
}
