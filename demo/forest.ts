/**
 * How the demo reads the service: a small JSON client, an agent's whole session, its
 * children, and the forest printed as a tree with every session's messages.
 */

export interface Entry {
  seq: number;
  type: string;
  role?: string;
  content?: { text: string }[];
  source?: { kind: string; senderSessionId?: string };
  toolCalls?: { id: string; name: string; input: unknown; effectKey?: string }[];
  toolCallId?: string;
  isError?: boolean;
  usage?: { totalTokens: number };
  messageId?: string;
  reason?: string;
  error?: string;
  event?: string;
  summary?: string;
  throughSeq?: number;
  /** An `approval` entry: the approval as it is from that entry on. */
  approval?: ApprovalView;
}

/** A tool call waiting for (or given) a person's decision, as `GET /v1/approvals` shows it. */
export interface ApprovalView {
  id: string;
  state: string;
  rootId: string;
  agentId: string;
  /** The agents from the root down to the one that asked. */
  path: string[];
  toolCallId: string;
  tool: string;
  input: unknown;
  effectKey: string;
  reason?: string;
}

export interface View {
  id: string;
  kind: string;
  label?: string;
  status: string;
  mode: string | null;
  inbox: { queued: number };
  staged: number;
  /** Set while a budget stops the step the agent has to take (status "paused"). */
  pausedBy?: { agentId: string; budget: string };
}

export interface Node {
  view: View;
  entries: Entry[];
  children: Node[];
}

export type Api = (method: string, path: string, body?: unknown) => Promise<unknown>;

/** JSON over HTTP; a status other than 2xx throws with the answer's body. */
export function client(base: string): Api {
  return async (method, path, body) => {
    const response = await fetch(`${base}${path}`, {
      method,
      ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`${method} ${path} answered ${response.status}: ${text}`);
    return text === '' ? undefined : (JSON.parse(text) as unknown);
  };
}

export async function session(api: Api, id: string): Promise<Entry[]> {
  const entries: Entry[] = [];
  let after = 0;
  for (;;) {
    const page = (await api('GET', `/v1/agents/${id}/session?after=${after}&limit=1000`)) as { entries: Entry[]; nextAfter: number | null };
    entries.push(...page.entries);
    if (page.nextAfter === null) return entries;
    after = page.nextAfter;
  }
}

export async function children(api: Api, id: string): Promise<View[]> {
  return ((await api('GET', `/v1/agents?parentId=${encodeURIComponent(id)}`)) as { items: View[] }).items;
}

export async function printTree(api: Api, rootId: string): Promise<Node> {
  return printNode(api, (await api('GET', `/v1/agents/${rootId}`)) as View, '');
}

async function printNode(api: Api, view: View, indent: string): Promise<Node> {
  const entries = await session(api, view.id);
  const name = view.label === undefined ? view.id : `${view.label} (${view.id})`;
  console.log(`${indent}${view.kind === 'root' ? 'root' : 'child'} ${name}  [${view.status}]`);
  for (const entry of entries) {
    const line = describe(entry);
    if (line !== undefined) console.log(`${indent}  │ ${line}`);
  }
  const node: Node = { view, entries, children: [] };
  for (const child of await children(api, view.id)) {
    console.log(`${indent}  │`);
    node.children.push(await printNode(api, child, `${indent}  `));
  }
  return node;
}

/**
 * One session entry as one line, or nothing for entries the tree leaves out (step starts). A
 * compaction shows what it stands for (the entries through its throughSeq, still listed above
 * it) and the summary later steps start from; an approval, the call it is about and its state.
 */
function describe(entry: Entry): string | undefined {
  const text = (entry.content ?? []).map((b) => b.text).join(' ');
  const short = (s: string): string => (s.length > 110 ? `${s.slice(0, 110)}…` : s);
  switch (entry.type) {
    case 'turn-start':
      return '── turn ──';
    case 'turn-end':
      return `── turn ${entry.reason}${entry.error === undefined ? '' : `: ${entry.error}`} ──`;
    case 'activation':
      return `(activation ${entry.event})`;
    case 'compaction':
      return `── compaction through seq ${entry.throughSeq}; later requests start from: ${JSON.stringify(entry.summary ?? '')} ──`;
    case 'approval': {
      const a = entry.approval;
      if (a === undefined) return undefined;
      return short(`(approval ${a.state}: ${a.tool} ${JSON.stringify(a.input)}${a.reason === undefined ? '' : ` — ${JSON.stringify(a.reason)}`})`);
    }
    case 'message': {
      if (entry.role === 'assistant') {
        const calls = (entry.toolCalls ?? []).map((c) => `${c.name} ${JSON.stringify(c.input)}`).join('; ');
        const tokens = entry.usage === undefined ? '' : `  [${entry.usage.totalTokens} tokens]`;
        return short(`model: ${[text, calls].filter((s) => s !== '').join(' → ')}`) + tokens;
      }
      if (entry.role === 'tool') return short(`${entry.isError === true ? 'tool error' : 'tool'}: ${text}`);
      const from = entry.source?.kind === 'subagent-report' ? 'report' : entry.source?.kind === 'coordinator' ? 'parent' : 'operator';
      return short(`${from}: ${text}`);
    }
    default:
      return undefined;
  }
}
