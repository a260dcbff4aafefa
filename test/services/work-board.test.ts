/**
 * WorkBoard with a fake notify, on fake timers: a parked step is announced (this instance's id
 * as the payload) within the minimum interval, a burst of parks is announced once, the repeat
 * announces every second while a step stays parked and stops with stop(); notices heard from
 * other instances wake the listeners, this instance's own and empty ones do not; a failing
 * notify is logged, never thrown.
 */
import type { Logger } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { WorkBoard } from '../../src/cluster/work-board.js';

const ME = 'instance-me';

function setup(options: { notify?: (payload: string) => Promise<void> } = {}): {
  board: WorkBoard;
  sent: string[];
  state: { parked: boolean };
  warn: ReturnType<typeof vi.fn>;
} {
  const sent: string[] = [];
  const state = { parked: true };
  const warn = vi.fn();
  const board = new WorkBoard({
    instanceId: ME,
    hasParked: () => state.parked,
    notify:
      options.notify ??
      ((payload) => {
        sent.push(payload);
        return Promise.resolve();
      }),
    logger: { warn } as unknown as Logger,
  });
  return { board, sent, state, warn };
}

beforeEach(() => {
  vi.useFakeTimers();
  vi.setSystemTime(1_000_000);
});

afterEach(() => {
  vi.useRealTimers();
});

describe('WorkBoard announcements', () => {
  it('announces a parked step with its own id, not synchronously but within the minimum interval', () => {
    const { board, sent } = setup();

    board.parked();
    expect(sent).toEqual([]);

    vi.advanceTimersByTime(20);
    expect(sent).toEqual([ME]);
  });

  it('announces a burst of parks once', () => {
    const { board, sent } = setup();

    for (let i = 0; i < 5; i++) board.parked();
    vi.advanceTimersByTime(20);

    expect(sent).toEqual([ME]);
    vi.advanceTimersByTime(5_000);
    expect(sent).toEqual([ME]);
  });

  it('a park soon after an announcement is announced when the minimum interval since it has passed', () => {
    const { board, sent } = setup();
    board.parked();
    vi.advanceTimersByTime(0);
    expect(sent).toEqual([ME]);

    vi.advanceTimersByTime(5);
    board.parked();
    vi.advanceTimersByTime(14);
    expect(sent).toEqual([ME]);

    vi.advanceTimersByTime(1);
    expect(sent).toEqual([ME, ME]);
  });

  it('does not announce when the step was claimed before the announcement was due', () => {
    const { board, sent, state } = setup();

    board.parked();
    state.parked = false;
    vi.advanceTimersByTime(20);

    expect(sent).toEqual([]);
  });

  it('start() re-announces every second while a step stays parked, and not while none is', () => {
    const { board, sent, state } = setup();
    board.start();

    vi.advanceTimersByTime(999);
    expect(sent).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(sent).toEqual([ME]);
    vi.advanceTimersByTime(1_000);
    expect(sent).toEqual([ME, ME]);

    state.parked = false;
    vi.advanceTimersByTime(3_000);
    expect(sent).toEqual([ME, ME]);

    state.parked = true;
    vi.advanceTimersByTime(1_000);
    expect(sent).toEqual([ME, ME, ME]);
    board.stop();
  });

  it('stop() ends the repeat and a pending announcement', () => {
    const { board, sent } = setup();
    board.start();
    vi.advanceTimersByTime(1_000);
    expect(sent).toEqual([ME]);

    board.parked();
    board.stop();
    vi.advanceTimersByTime(5_000);

    expect(sent).toEqual([ME]);
  });

  it('a notify that fails is logged and does not escape', async () => {
    const failure = new Error('connection lost');
    const { board, warn } = setup({ notify: () => Promise.reject(failure) });

    board.parked();
    await vi.advanceTimersByTimeAsync(20);

    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]?.[0]).toEqual({ err: failure });
  });
});

describe('WorkBoard notices', () => {
  it('wakes every listener on a notice from another instance, and ignores its own and empty ones', () => {
    const { board } = setup();
    const first = vi.fn();
    const second = vi.fn();
    board.onWork(first);
    board.onWork(second);

    board.heard(ME);
    board.heard(undefined);
    expect(first).not.toHaveBeenCalled();
    expect(second).not.toHaveBeenCalled();

    board.heard('instance-other');
    expect(first).toHaveBeenCalledTimes(1);
    expect(second).toHaveBeenCalledTimes(1);
  });

  it('a listener that unsubscribed is not woken; the others still are', () => {
    const { board } = setup();
    const gone = vi.fn();
    const staying = vi.fn();
    const unsubscribe = board.onWork(gone);
    board.onWork(staying);

    unsubscribe();
    board.heard('instance-other');

    expect(gone).not.toHaveBeenCalled();
    expect(staying).toHaveBeenCalledTimes(1);
  });

  it('a listener that unsubscribes while being woken does not stop the others', () => {
    const { board } = setup();
    const woken: string[] = [];
    const unsubscribeFirst = board.onWork(() => {
      woken.push('first');
      unsubscribeFirst();
      unsubscribeSecond();
    });
    const unsubscribeSecond = board.onWork(() => woken.push('second'));

    board.heard('instance-other');
    board.heard('instance-other');

    expect(woken).toEqual(['first', 'second']);
  });
});
