/**
 * The pino logger: JSON lines, request ids, and redaction of every credential the service
 * handles (operator keys, agent tokens), wherever a serializer might put them.
 */
import { pino, type Logger, type LoggerOptions } from 'pino';

export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers["x-agent-token"]',
  'headers.authorization',
  'headers["x-agent-token"]',
  'agentToken',
  '*.agentToken',
  'token',
  '*.token',
];

/** A URL as logged: every query value masked, since a caller may put a token there by mistake. */
export function maskQuery(url: string): string {
  const q = url.indexOf('?');
  if (q === -1) return url;
  const params = url.slice(q + 1).split('&').map((pair) => {
    const eq = pair.indexOf('=');
    return eq === -1 ? pair : `${pair.slice(0, eq)}=[redacted]`;
  });
  return `${url.slice(0, q)}?${params.join('&')}`;
}

interface LoggedRequest {
  method?: string;
  url?: string;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

export function loggerOptions(level: string): LoggerOptions {
  return {
    level,
    base: { service: 'agentforest' },
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    serializers: {
      // Fastify's request summary, with the query values masked.
      req: (req: LoggedRequest) => ({
        method: req.method,
        url: req.url === undefined ? undefined : maskQuery(req.url),
        host: req.host,
        remoteAddress: req.ip,
        remotePort: req.socket?.remotePort,
      }),
    },
  };
}

/**
 * Standard output, written asynchronously as pino's default is, but in chunks of at most 4 KiB
 * rather than 16 KiB. While a write is in flight, each new line is appended to the last pending
 * chunk, and the chunk's byte length is measured again first, which copies the whole chunk
 * into one flat string: the smaller the chunk, the less each line copies under load
 * (`npx tsx bench/log-lines.ts` measures it).
 */
export const LOG_CHUNK_BYTES = 4096;

export function stdoutDestination(): pino.DestinationStream {
  return pino.destination({ dest: process.stdout.fd, sync: false, minLength: 0, maxWrite: LOG_CHUNK_BYTES });
}

export function createLogger(level: string, destination: pino.DestinationStream = stdoutDestination()): Logger {
  return pino(loggerOptions(level), destination);
}
