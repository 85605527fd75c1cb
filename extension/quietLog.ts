import * as vscode from 'vscode';

/** What a lost or closed connection makes vscode-jsonrpc and the language client report. */
const EXPECTED_DISCONNECT =
  /Connection (is )?disposed|Connection got disposed|connection got disposed|Pending response rejected|Client is not running|Connection to server got closed|Stopping server failed|write after end|ECONNRESET|socket hang up/i;

/**
 * The language client's own words when its connection closes: the session reconnects by itself and
 * says why it lost the agent in one line, so these say nothing an operator can use.
 */
const CLIENT_CLOSE_CHATTER =
  /Server will not be restarted|Stopping server failed|Stopping server timed out|Client is not running and can't be stopped/i;

/**
 * The output channel, with three changes: the language client's close chatter is dropped; an expected disconnect (the agent stopped, restarted or was
 * killed; the session reconnects by itself) is written as one info line instead of an error with a
 * stack trace, and the last lines are kept so the tests can read what the user would see.
 */
export function quietLog(log: vscode.LogOutputChannel): vscode.LogOutputChannel & { readonly lines: string[] } {
  const lines: string[] = [];
  const keep = (text: string) => {
    lines.push(text);
    if (lines.length > 2000) lines.shift();
  };
  const text = (message: unknown, args: unknown[]): string =>
    [message, ...args].map((a) => (a instanceof Error ? (a.stack ?? a.message) : typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
  const firstLine = (t: string) => t.split('\n').find((l) => l.trim() !== '' && !/^\s+at /.test(l)) ?? t;
  const quiet = (level: 'error' | 'warn', message: string | Error, args: unknown[]) => {
    const t = text(message, args);
    if (CLIENT_CLOSE_CHATTER.test(t)) return;
    if (EXPECTED_DISCONNECT.test(t)) {
      const line = `connection ended: ${stripLevel(firstLine(t))}`;
      keep(line);
      log.info(line);
      return;
    }
    keep(t);
    if (level === 'error') log.error(message, ...args);
    else log.warn(typeof message === 'string' ? message : t, ...args);
  };
  return new Proxy(log, {
    get(target, prop, receiver) {
      if (prop === 'lines') return lines;
      if (prop === 'error') return (message: string | Error, ...args: unknown[]) => quiet('error', message, args);
      if (prop === 'warn') return (message: string, ...args: unknown[]) => quiet('warn', message, args);
      if (prop === 'append' || prop === 'appendLine') {
        return (value: string) => {
          if (CLIENT_CLOSE_CHATTER.test(value)) return;
          if (EXPECTED_DISCONNECT.test(value)) {
            const line = `connection ended: ${stripLevel(firstLine(value))}`;
            keep(line);
            target.info(line);
            return;
          }
          keep(value);
          target[prop](value);
        };
      }
      if (prop === 'info' || prop === 'debug' || prop === 'trace') {
        return (message: string, ...args: unknown[]) => {
          keep(text(message, args));
          target[prop](message, ...args);
        };
      }
      const value: unknown = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  }) as vscode.LogOutputChannel & { readonly lines: string[] };
}

/** "[Error - 1:39:38 PM] Connection to server got closed." → "Connection to server got closed." */
function stripLevel(line: string): string {
  return line
    .replace(/^\[(Error|Warn|Info|Trace)\s*-\s*[^\]]*\]\s*/, '')
    .replace(/^Error:\s*/, '')
    .trim();
}
