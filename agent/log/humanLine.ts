const LEVELS: Record<number, string> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warning', 50: 'error', 60: 'fatal' };
const SKIP = new Set(['level', 'time', 'pid', 'hostname', 'name', 'msg', 'v', 'event']);

export interface HumanLineStyle {
  /**
   * `clock`: the agent's terminal, a long-lived log read as it scrolls: `18:15:02 <msg>`, the level
   * named only when it is not info. Otherwise a CLI's message: `quantilica: warning: <msg>`.
   */
  clock?: boolean;
}

/**
 * One pino JSON line as one line for a person. Fields follow in parentheses (`key=value, …`), except
 * those whose value the message already says (a run line names its run and fetcher itself).
 */
export function humanLine(json: string, style: HumanLineStyle = {}): string {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const level = LEVELS[Number(record.level)] ?? 'log';
  const msg = typeof record.msg === 'string' ? record.msg : '';
  const words = new Set(msg.split(/[\s(),;]+/));
  const said = (text: string) => (/\s/.test(text) ? msg.includes(text) : words.has(text));
  const fields = Object.entries(record)
    .filter(([key, value]) => !SKIP.has(key) && value !== null && value !== undefined)
    .map(([key, value]) => [key, typeof value === 'string' ? value : JSON.stringify(value)] as const)
    .filter(([, text]) => !said(text))
    .map(([key, text]) => `${key}=${text}`);
  const tail = `${msg}${fields.length > 0 ? ` (${fields.join(', ')})` : ''}\n`;
  if (!style.clock) return `quantilica: ${level}: ${tail}`;
  const at = new Date(typeof record.time === 'number' ? record.time : Date.now());
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())} ${level === 'info' ? '' : `${level}: `}${tail}`;
}
