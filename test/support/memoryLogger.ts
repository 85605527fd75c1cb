import type { Logger } from '../../agent/log/logger';

/** A logger that keeps every record in memory; for tests that assert what was logged, in order. */
export function memoryLogger(): Logger & { records: Array<{ level: string; msg: string | undefined; obj: object }> } {
  const records: Array<{ level: string; msg: string | undefined; obj: object }> = [];
  const at = (level: string) => (obj: object, msg?: string) => {
    records.push({ level, msg, obj });
  };
  return { records, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}
