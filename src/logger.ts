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

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return destination === undefined ? pino(loggerOptions(level)) : pino(loggerOptions(level), destination);
}
