import pino from 'pino';

/** The logging surface modules take as a parameter, so tests can capture what a module logs. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** JSON lines on stderr (stdout stays free for CLI output); level from QUANTILICA_LOG_LEVEL. */
export function createLogger(name: string, level = process.env.QUANTILICA_LOG_LEVEL ?? 'info'): Logger {
  return pino({ name, level, base: { pid: process.pid } }, pino.destination(2));
}

/** A logger that keeps every record in memory; for tests that assert what was logged, in order. */
export function memoryLogger(): Logger & { records: Array<{ level: string; msg: string | undefined; obj: object }> } {
  const records: Array<{ level: string; msg: string | undefined; obj: object }> = [];
  const at = (level: string) => (obj: object, msg?: string) => { records.push({ level, msg, obj }); };
  return { records, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}
