/**
 * What the configuration says about the session store, shared by the configuration, the start
 * and the adapters: SQLite's synchronous modes, and a database URL as messages may show it.
 */

/** `full`: a commit survives power loss; `normal`: it survives a process crash. */
export const SQLITE_SYNC_MODES = ['full', 'normal'] as const;
export type SqliteSyncMode = (typeof SQLITE_SYNC_MODES)[number];

/** The URL without its password (or any secret-looking parameter), for messages and logs. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    for (const key of [...parsed.searchParams.keys()]) if (/pass|secret|key/i.test(key)) parsed.searchParams.set(key, '***');
    return parsed.toString();
  } catch {
    return '(an unparsable database URL)';
  }
}
