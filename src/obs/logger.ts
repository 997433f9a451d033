// The process logger (pino). Secrets never reach a log line: api keys, bearer headers and
// credentials are redacted by path wherever they could appear in a logged object.

import { pino, type Logger as PinoLogger } from 'pino';

export type Logger = PinoLogger;

export const REDACT_PATHS = [
  'api_key',
  'apiKey',
  'admin_key',
  'adminKey',
  'registration_key',
  'registrationKey',
  '*.api_key',
  '*.apiKey',
  '*.admin_key',
  '*.adminKey',
  '*.registration_key',
  '*.registrationKey',
  'headers.authorization',
  '*.headers.authorization',
  'req.headers.authorization',
  'authorization',
  '*.authorization',
];

export function createLogger(opts: { level?: string; name?: string; destination?: number | string } = {}): Logger {
  return pino(
    {
      name: opts.name ?? 'rlgate',
      level: opts.level ?? process.env.RLGATE_LOG_LEVEL ?? 'info',
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      base: { pid: process.pid },
    },
    pino.destination({ dest: opts.destination ?? 2, sync: false }),
  );
}

/** For tests and library use: a logger that writes nothing. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
