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

export function loggerOptions(level: string): LoggerOptions {
  return {
    level,
    base: { service: 'agentforest' },
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
  };
}

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return destination === undefined ? pino(loggerOptions(level)) : pino(loggerOptions(level), destination);
}
