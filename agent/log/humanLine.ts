const LEVELS: Record<number, string> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warning', 50: 'error', 60: 'fatal' };
const SKIP = new Set(['level', 'time', 'pid', 'hostname', 'name', 'msg', 'v']);

/** One pino JSON line as one line for a person: `quantilica: warning: <msg> (key=value, …)`. */
export function humanLine(json: string): string {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const level = LEVELS[Number(record.level)] ?? 'log';
  const fields = Object.entries(record)
    .filter(([key]) => !SKIP.has(key))
    .map(([key, value]) => `${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`);
  const msg = typeof record.msg === 'string' ? record.msg : '';
  return `quantilica: ${level}: ${msg}${fields.length > 0 ? ` (${fields.join(', ')})` : ''}\n`;
}
