import pino from 'pino';
import { redactCredentials } from '../config/redact';
import { humanLine, type HumanLineStyle } from './humanLine';

/** The logging surface modules take as a parameter, so tests can capture what a module logs. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export type LogFormat = 'auto' | 'json' | 'human';

/**
 * JSON lines on stderr (stdout stays free for CLI output), or one human line per record when the
 * format says so (`auto`: human when stderr is a terminal), in the given style. Credentials in URLs
 * are redacted from every message and every string field, whatever module logs them.
 */
export function createLogger(
  name: string,
  level = process.env.QUANTILICA_LOG_LEVEL ?? 'info',
  format: LogFormat = 'json',
  style: HumanLineStyle = {},
): Logger {
  const human = format === 'human' || (format === 'auto' && process.stderr.isTTY === true);
  const destination = human
    ? {
        write: (line: string) => {
          process.stderr.write(humanLine(line, style));
        },
      }
    : pino.destination(2);
  return pino(
    {
      name,
      level,
      base: { pid: process.pid },
      hooks: {
        logMethod(args, method) {
          method.apply(this, args.map((arg) => redactArg(arg)) as Parameters<typeof method>);
        },
      },
    },
    destination,
  );
}

function redactArg(arg: unknown): unknown {
  if (typeof arg === 'string') return redactCredentials(arg);
  if (arg === null || typeof arg !== 'object' || Array.isArray(arg)) return arg;
  if (arg instanceof Error) return { err: redactCredentials(arg.message) };
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(arg)) out[key] = typeof value === 'string' ? redactCredentials(value) : value;
  return out;
}
