/**
 * Which node-postgres errors mean the server cannot be reached or cannot write, rather than a
 * fault of the statement: the socket's own errors, a connection that ended or could not be
 * made in time, and the SQLSTATE classes for connection failures (08), a server shutting down
 * or starting (57P01–57P03), insufficient resources such as a full disk (53) and system or
 * I/O errors (58).
 */
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);
const SHUTDOWN_STATES = new Set(['57P01', '57P02', '57P03']);
const UNAVAILABLE_CLASSES = new Set(['08', '53', '58']);
/** node-postgres's and pg-pool's own texts for a connection that ended or never came. */
const CONNECTION_TEXTS = /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error and is not queryable)/;

export function postgresUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (SOCKET_CODES.has(code) || SHUTDOWN_STATES.has(code)) return true;
    if (/^[0-9A-Z]{5}$/.test(code) && UNAVAILABLE_CLASSES.has(code.slice(0, 2))) return true;
  }
  return CONNECTION_TEXTS.test(error.message);
}
