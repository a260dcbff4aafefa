/**
 * The forest view's drafts (src/ui/assets/deltas.js), which assemble the forest stream's live
 * deltas into what each driven agent's model has written of its step so far: seq order, a new
 * bubble per step attempt, `reset`, holes where deltas were missed, and the end of a draft at
 * the committed assistant message, the turn's end or another attempt's start. The module is
 * the browser's plain JavaScript, loaded as it is served.
 */
import { describe, expect, it } from 'vitest';

interface DraftCall {
  index: number;
  id: string | undefined;
  name: string;
  args: string;
}

interface Draft {
  agentId: string;
  stepId: string;
  attempt: number;
  seq: number;
  text: string;
  calls: DraftCall[];
  incomplete: boolean;
}

interface Drafts {
  get(agentId: string): Draft | undefined;
  apply(event: { event: string; data: unknown }): string | undefined;
}

interface DeltasModule {
  Drafts: new () => Drafts;
  HOLE: string;
}

// A computed specifier: the module is JavaScript without types, described by the interfaces above.
const MODULE = new URL('../../src/ui/assets/deltas.js', import.meta.url).href;
const { Drafts, HOLE } = (await import(MODULE)) as DeltasModule;

const delta = (seq: number, fields: Record<string, unknown> = {}): { event: string; data: Record<string, unknown> } => ({
  event: 'delta',
  data: { agentId: 'a', stepId: 's1', attempt: 1, seq, ...fields },
});
const entry = (fields: Record<string, unknown>): { event: string; data: unknown } => ({ event: 'entry', data: { agentId: 'a', entry: { seq: 9, at: '', ...fields } } });
const assistant = entry({ type: 'message', role: 'assistant', content: [{ type: 'text', text: 'Hello there' }] });

describe('the forest view\'s drafts', () => {
  it('grow an agent\'s text in seq order, each delta once, and name the agent each delta changed', () => {
    const drafts = new Drafts();
    expect(drafts.apply(delta(1, { text: 'Hel' }))).toBe('a');
    expect(drafts.apply(delta(2, { text: 'lo ' }))).toBe('a');
    expect(drafts.apply(delta(2, { text: 'lo ' }))).toBeUndefined();
    expect(drafts.apply(delta(1, { text: 'Hel' }))).toBeUndefined();
    drafts.apply(delta(3, { text: 'there' }));
    expect(drafts.get('a')).toMatchObject({ stepId: 's1', attempt: 1, seq: 3, text: 'Hello there', incomplete: false });
    expect(drafts.get('b')).toBeUndefined();
  });

  it('end at the committed assistant message, and a late delta of that step starts no second draft', () => {
    const drafts = new Drafts();
    drafts.apply(delta(1, { text: 'Hello' }));
    expect(drafts.apply(entry({ type: 'step-start', stepId: 's1', index: 0 }))).toBeUndefined();
    expect(drafts.get('a')?.text).toBe('Hello');
    expect(drafts.apply(assistant)).toBe('a');
    expect(drafts.get('a')).toBeUndefined();
    expect(drafts.apply(delta(2, { text: ' there' }))).toBeUndefined();
    expect(drafts.get('a')).toBeUndefined();
    // A message that is not the model's answer ends nothing.
    drafts.apply(delta(1, { stepId: 's2', text: 'Next' }));
    expect(drafts.apply(entry({ type: 'message', role: 'tool', content: [] }))).toBeUndefined();
    expect(drafts.get('a')?.text).toBe('Next');
  });

  it('start a new draft for a new step or attempt, and end one at its turn\'s end or at another attempt\'s start', () => {
    const drafts = new Drafts();
    drafts.apply(delta(1, { text: 'first step' }));
    drafts.apply(delta(1, { stepId: 's2', text: 'second' }));
    expect(drafts.get('a')).toMatchObject({ stepId: 's2', text: 'second' });
    expect(drafts.apply(delta(2, { text: ' more of the first' }))).toBeUndefined();

    expect(drafts.apply(entry({ type: 'step-start', stepId: 's2', index: 1, attempt: 2 }))).toBe('a');
    expect(drafts.get('a')).toBeUndefined();
    drafts.apply(delta(1, { stepId: 's2', attempt: 2, text: 'again' }));
    expect(drafts.get('a')).toMatchObject({ stepId: 's2', attempt: 2, text: 'again' });

    expect(drafts.apply(entry({ type: 'turn-end', reason: 'failed' }))).toBe('a');
    expect(drafts.get('a')).toBeUndefined();
  });

  it('start again from a reset delta\'s content, text and tool calls', () => {
    const drafts = new Drafts();
    drafts.apply(delta(1, { text: 'A broken ans' }));
    drafts.apply(delta(2, { toolCall: { index: 0, id: 'c1', name: 'search', argumentsDelta: '{"q":' } }));
    drafts.apply(delta(3, { reset: true, text: 'A whole' }));
    expect(drafts.get('a')).toMatchObject({ seq: 3, text: 'A whole', calls: [], incomplete: false });
    drafts.apply(delta(4, { text: ' answer' }));
    expect(drafts.get('a')?.text).toBe('A whole answer');
  });

  it('mark where deltas were missed and go on, as for a page that connected mid-step; a reset clears the marks', () => {
    const drafts = new Drafts();
    drafts.apply(delta(4, { text: 'middle' }));
    expect(drafts.get('a')).toMatchObject({ text: `${HOLE}middle`, incomplete: true });
    drafts.apply(delta(5, { text: ' on' }));
    // Deltas 6 to 8 were dropped for this slow page; the stream said so, and that alone changes nothing.
    expect(drafts.apply({ event: 'deltas-dropped', data: { count: 3 } })).toBeUndefined();
    drafts.apply(delta(9, { text: ' end' }));
    expect(drafts.get('a')).toMatchObject({ seq: 9, text: `${HOLE}middle on${HOLE} end`, incomplete: true });
    drafts.apply(delta(10, { reset: true, text: 'Whole' }));
    expect(drafts.get('a')).toMatchObject({ text: 'Whole', incomplete: false });
  });

  it('assemble each tool call\'s name and arguments by index', () => {
    const drafts = new Drafts();
    drafts.apply(delta(1, { text: 'Looking.' }));
    drafts.apply(delta(2, { toolCall: { index: 1, id: 'c2', name: 'fetch_page', argumentsDelta: '' } }));
    drafts.apply(delta(3, { toolCall: { index: 0, id: 'c1', name: 'search', argumentsDelta: '{"q":"ep' } }));
    drafts.apply(delta(4, { toolCall: { index: 0, argumentsDelta: 'isodic"}' } }));
    drafts.apply(delta(5, { toolCall: { index: 1, argumentsDelta: '{"url":"x"}' } }));
    expect(drafts.get('a')?.calls).toEqual([
      { index: 0, id: 'c1', name: 'search', args: '{"q":"episodic"}' },
      { index: 1, id: 'c2', name: 'fetch_page', args: '{"url":"x"}' },
    ]);
    expect(drafts.get('a')?.text).toBe('Looking.');
  });

  it('keep each agent\'s draft apart', () => {
    const drafts = new Drafts();
    drafts.apply(delta(1, { text: 'mine' }));
    drafts.apply(delta(1, { agentId: 'b', stepId: 'other', text: 'yours' }));
    drafts.apply({ event: 'entry', data: { agentId: 'b', entry: { seq: 3, at: '', type: 'message', role: 'assistant', content: [] } } });
    expect(drafts.get('a')?.text).toBe('mine');
    expect(drafts.get('b')).toBeUndefined();
  });
});
