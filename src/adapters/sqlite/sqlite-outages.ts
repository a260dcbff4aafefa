/**
 * Which SQLite errors mean the file cannot be read or written right now, rather than a fault
 * of the statement: a full disk or database (SQLITE_FULL), an I/O error of any kind
 * (SQLITE_IOERR_*), a file that cannot be opened, and the writer thread gone.
 */
const UNAVAILABLE_CODES = /^SQLITE_(FULL|IOERR|CANTOPEN|READONLY_DBMOVED|NOMEM)/;

export function sqliteUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && UNAVAILABLE_CODES.test(code)) return true;
  return error.message.startsWith('the SQLite writer thread ');
}
