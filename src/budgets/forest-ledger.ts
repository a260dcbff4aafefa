/**
 * The ledger: for every forest it holds, each agent's account — its limits, what it spent and
 * what its subtree spent, and the tools granted to it. It is kept from the log alone: it observes every header and entry as
 * the session log queues them (a step's charge is in force in the claim that wrote its
 * step-start), and a forest it does not hold is read back from the store by one pass over the
 * forest's headers and entries (`hold`). A forest is kept while any of its agents is live
 * here or someone holds it; after that for a while (keepUnused), then forgotten.
 *
 * Invariants: an account's `subtree` is its `self` plus its children's `subtree`; a forest
 * read back while entries are being queued for it counts each of them once (the queued ones
 * past what the read found are applied after it).
 */
import { addUsage, exhaustedKind, zeroUsage, type Budget, type Usage } from '../domain/budget.js';
import { chargeOf } from '../domain/charges.js';
import type { SessionHeader } from '../domain/session.js';
import type { LogObserver, SessionLog } from '../sessions/session-log.js';
import type { BatchEntry } from '../sessions/session-store.js';

/** Shared by every account that spent nothing, or has no children (no object per idle agent). */
const NOTHING: Usage = Object.freeze(zeroUsage());
const NO_CHILDREN: readonly Account[] = Object.freeze([]);

/**
 * One agent's account. What it and its subtree spent, and its children, are made at first
 * use: an idle agent's account is a few fields.
 */
export class Account {
  private kids: Account[] | undefined;
  private own: Usage | undefined;
  private tree: Usage | undefined;

  constructor(
    readonly id: string,
    readonly parent: Account | undefined,
    /** The limits of this agent's subtree; undefined: none of its own. */
    public budget: Budget | undefined,
    /** The tools granted to it (domain/grants.ts); undefined: the service-owned ones. */
    public grants: readonly string[] | undefined,
  ) {
    parent?.adopt(this);
  }

  get children(): readonly Account[] {
    return this.kids ?? NO_CHILDREN;
  }

  /** What this agent spent (do not change it). */
  get self(): Usage {
    return this.own ?? NOTHING;
  }

  /** What this agent and every descendant spent (do not change it). */
  get subtree(): Usage {
    return this.tree ?? NOTHING;
  }

  chargeSelf(charge: Usage): void {
    addUsage((this.own ??= zeroUsage()), charge);
  }

  chargeSubtree(charge: Usage): void {
    addUsage((this.tree ??= zeroUsage()), charge);
  }

  private adopt(child: Account): void {
    (this.kids ??= []).push(child);
  }
}

export interface LedgerDeps {
  log: SessionLog;
  /** Live agents of a forest here: a forest with some is held. */
  liveInForest: (rootId: string) => number;
  /** A charge made `holder`'s budget run out (in the span that queued the entry). */
  onExhausted: (holder: Account) => void;
  /**
   * Forests no one uses kept for later reads, the least recently used forgotten first. Only
   * where every write to them passes this process (one instance): with several, another
   * instance may write to a forest this one does not hold, so 0.
   */
  keepUnused: number;
}

/** Being read back: what is queued meanwhile waits in `queued`. */
interface Reading {
  holds: number;
  queued: (SessionHeader | BatchEntry)[];
  done: Promise<void>;
}

/** A held forest is the number of holds on it (no object per forest), one being read back its Reading. */
type Forest = number | Reading;

/** Entries read per page when a forest is read back. */
const PAGE = 1_000;

export class ForestLedger implements Required<Pick<LogObserver, 'headerQueued' | 'entryQueued'>> {
  private readonly accounts = new Map<string, Account>();
  private readonly forests = new Map<string, Forest>();
  /** Held forests no one uses now, oldest first (see keepUnused). */
  private readonly unused = new Set<string>();

  constructor(private readonly deps: LedgerDeps) {}

  /** The account of an agent whose forest is held (undefined otherwise). */
  account(id: string): Account | undefined {
    return this.accounts.get(id);
  }

  /** The agents from the forest's root down to `id` (just `id` when its forest is not held). */
  lineage(id: string): string[] {
    const path: string[] = [];
    for (let at = this.accounts.get(id); at !== undefined; at = at.parent) path.unshift(at.id);
    return path.length === 0 ? [id] : path;
  }

  /** Whether the forest's accounts are here and current. */
  holds(rootId: string): boolean {
    return typeof this.forests.get(rootId) === 'number';
  }

  /**
   * Hold a forest's accounts (reading them back first when they are not here) until the
   * returned release is called. Publication of an agent happens while it is held, so a live
   * agent's forest is always here.
   */
  async hold(rootId: string): Promise<() => void> {
    this.unused.delete(rootId);
    const forest = this.forests.get(rootId);
    if (typeof forest === 'number') {
      this.forests.set(rootId, forest + 1);
    } else {
      const reading = forest ?? this.startReading(rootId);
      reading.holds++;
      try {
        await reading.done;
      } catch (error) {
        reading.holds--;
        throw error;
      }
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const now = this.forests.get(rootId);
      if (typeof now !== 'number') return;
      this.forests.set(rootId, Math.max(0, now - 1));
      this.forgetIfUnused(rootId);
    };
  }

  /** An agent of the forest left memory: when nothing else uses it, keep it a while (keepUnused) or forget it. */
  forgetIfUnused(rootId: string): void {
    const forest = this.forests.get(rootId);
    if (forest !== 0 || this.deps.liveInForest(rootId) > 0) return;
    this.unused.delete(rootId);
    this.unused.add(rootId);
    for (const oldest of this.unused) {
      if (this.unused.size <= this.deps.keepUnused) break;
      this.forget(oldest);
    }
  }

  /** Forget a forest at once (this instance lost it). */
  forget(rootId: string): void {
    this.unused.delete(rootId);
    this.forests.delete(rootId);
    const root = this.accounts.get(rootId);
    for (const account of root === undefined ? [] : subtreeOf(root)) this.accounts.delete(account.id);
  }

  /** The forests whose accounts are here (live here, or kept from their last use), for the metrics. */
  heldForests(): string[] {
    return [...this.forests.keys()].filter((root) => this.holds(root));
  }

  headerQueued(header: SessionHeader): void {
    const rootId = header.rootSession ?? header.id;
    // A new root is a new forest: nothing read before about its id stands.
    if (header.kind === 'root') {
      this.forget(rootId);
      this.forests.set(rootId, 0);
    }
    const forest = this.forests.get(rootId);
    if (typeof forest === 'number') this.open(header, this.accounts);
    else forest?.queued.push(header);
  }

  entryQueued(item: BatchEntry): void {
    const forest = this.forests.get(item.rootId);
    if (typeof forest === 'number') this.apply(item, this.accounts, true);
    else forest?.queued.push(item);
  }

  private startReading(rootId: string): Reading {
    const reading: Reading = { holds: 0, queued: [], done: Promise.resolve() };
    this.forests.set(rootId, reading);
    reading.done = this.readBack(rootId, reading);
    return reading;
  }

  /** One pass over the forest's headers and entries, then what was queued meanwhile. */
  private async readBack(rootId: string, reading: Reading): Promise<void> {
    const queued = reading.queued;
    const accounts = new Map<string, Account>();
    try {
      await this.deps.log.durable(rootId);
      const store = this.deps.log.store;
      const root = await store.header(rootId);
      if (root !== undefined) {
        this.open(root.header, accounts);
        for (let level = [rootId]; level.length > 0; ) {
          const next: string[] = [];
          for (const parentId of level) {
            for (const { header } of await store.children(parentId)) {
              this.open(header, accounts);
              next.push(header.id);
            }
          }
          level = next;
        }
      }
      let through = 0;
      for (;;) {
        const page = await store.readForest(rootId, through, PAGE);
        // A session created after the headers were read may already have entries here.
        for (const item of page) if (!accounts.has(item.sessionId)) await this.openStored(item.sessionId, accounts);
        for (const item of page) this.apply(item, accounts, false);
        if (page.length > 0) through = page[page.length - 1]!.forestSeq;
        if (page.length < PAGE) break;
      }
      for (const item of queued) {
        if ('entry' in item) {
          if (item.forestSeq > through) this.apply(item, accounts, false);
        } else if (!accounts.has(item.id)) this.open(item, accounts);
      }
    } catch (error) {
      if (this.forests.get(rootId) === reading) this.forests.delete(rootId);
      throw error;
    }
    // Forgotten meanwhile (this instance lost the forest): what was read is not installed.
    if (this.forests.get(rootId) !== reading) return;
    for (const [id, account] of accounts) this.accounts.set(id, account);
    this.forests.set(rootId, reading.holds);
  }

  /** Open a session's account from its stored header, its parent's first. */
  private async openStored(id: string, accounts: Map<string, Account>): Promise<void> {
    const header = (await this.deps.log.store.header(id))?.header;
    if (header === undefined) return;
    if (header.parentSession !== null && !accounts.has(header.parentSession)) await this.openStored(header.parentSession, accounts);
    this.open(header, accounts);
  }

  private open(header: SessionHeader, accounts: Map<string, Account>): void {
    if (accounts.has(header.id)) return;
    const parent = header.parentSession === null ? undefined : accounts.get(header.parentSession);
    accounts.set(header.id, new Account(header.id, parent, header.budget === undefined ? undefined : { ...header.budget }, header.grants));
  }

  private apply({ sessionId, entry }: BatchEntry, accounts: Map<string, Account>, live: boolean): void {
    const account = accounts.get(sessionId);
    if (account === undefined) return;
    if (entry.type === 'budget') {
      account.budget = { ...entry.budget };
      return;
    }
    if (entry.type === 'grants') {
      account.grants = entry.grants;
      return;
    }
    const charge = chargeOf(entry);
    if (charge === undefined) return;
    account.chargeSelf(charge);
    for (let holder: Account | undefined = account; holder !== undefined; holder = holder.parent) {
      const before = live && holder.budget !== undefined ? exhaustedKind(holder.budget, holder.subtree) : undefined;
      holder.chargeSubtree(charge);
      if (!live || holder.budget === undefined || before !== undefined) continue;
      if (exhaustedKind(holder.budget, holder.subtree) !== undefined) this.deps.onExhausted(holder);
    }
  }
}

/** An account and every account below it, parents before their children. */
export function subtreeOf(top: Account): Account[] {
  const out: Account[] = [top];
  for (let i = 0; i < out.length; i++) out.push(...out[i]!.children);
  return out;
}
