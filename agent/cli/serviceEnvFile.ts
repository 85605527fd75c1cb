import * as fs from 'node:fs';
import * as path from 'node:path';
import { redactSecretValue } from '../config/redact';
import { SECRET_SETTINGS } from '../config/settings';
import { hasControlCharacter } from '../config/hasControlCharacter';

/** What `service install` did with one variable of its environment. */
export interface CarriedSetting {
  name: string;
  /** As printed: a secret's credentials redacted. */
  shown: string;
  outcome: 'written' | 'secret-not-written' | 'control-character';
}

// The variables of one run (runManager sets them for a fetcher), not settings of the agent.
const RUN_VARIABLES = new Set([
  'QUANTILICA_RUN_ID',
  'QUANTILICA_FETCHER',
  'QUANTILICA_POOL',
  'QUANTILICA_SLOT',
  'QUANTILICA_FETCHER_UMASK',
  'QUANTILICA_CGROUP_PROCS',
]);
const SECRETS = new Set<string>(SECRET_SETTINGS);

/** The agent's settings in an environment: CRON_*, QUANTILICA_*, DATA_DIR and the secrets the settings table marks. */
export function settingsOf(env: NodeJS.ProcessEnv): [string, string][] {
  return Object.entries(env)
    .filter((e): e is [string, string] => e[1] !== undefined)
    .filter(
      ([name]) => (/^(CRON|QUANTILICA)_[A-Z0-9_]+$/.test(name) || name === 'DATA_DIR' || SECRETS.has(name)) && !RUN_VARIABLES.has(name),
    )
    .sort(([a], [b]) => a.localeCompare(b));
}

/**
 * One `NAME=value` line as systemd's EnvironmentFile= reads it: single quotes take everything
 * literally; a value holding a single quote goes in double quotes, where `\`, `"`, `$` and `` ` ``
 * are escaped.
 */
export function envFileLine(name: string, value: string): string {
  if (!value.includes("'")) return `${name}='${value}'`;
  return `${name}="${value.replace(/([\\"$`])/g, '\\$1')}"`;
}

const HEADER = (unit: string) => `# Environment of the Quantilica agent (systemd user unit ${unit}), written by quantilica service install.
# One NAME=value per line; restart the agent after a change: systemctl --user restart ${unit}
`;

/**
 * Writes (or updates) the service's environment file with the settings of `env`: a line of the file
 * for a carried name is replaced, other lines are kept (what an operator wrote by hand stays). Secrets
 * are written only with `withSecrets`; the file is 0600, replaced whole (a temporary file renamed),
 * never written through a link.
 */
export function writeServiceEnvFile(envFile: string, env: NodeJS.ProcessEnv, withSecrets: boolean, unit: string): CarriedSetting[] {
  const carried: CarriedSetting[] = [];
  const lines = new Map<string, string>();
  for (const [name, value] of settingsOf(env)) {
    const secret = SECRETS.has(name);
    const shown = `${name}=${secret ? redactSecretValue(value) : value}`;
    // A newline would end the line early and make the rest a setting of its own.
    if (hasControlCharacter(value))
      carried.push({ name, shown: `${name}=${JSON.stringify(secret ? redactSecretValue(value) : value)}`, outcome: 'control-character' });
    else if (secret && !withSecrets) carried.push({ name, shown, outcome: 'secret-not-written' });
    else {
      carried.push({ name, shown, outcome: 'written' });
      lines.set(name, envFileLine(name, value));
    }
  }
  const previous = readOwnFile(envFile);
  const out: string[] = [];
  const replaced = new Set<string>();
  for (const line of previous === null ? HEADER(unit).trimEnd().split('\n') : previous.replace(/\n$/, '').split('\n')) {
    const name = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=/.exec(line)?.[1];
    const next = name === undefined ? undefined : lines.get(name);
    if (name === undefined || next === undefined) out.push(line);
    else if (!replaced.has(name)) {
      out.push(next);
      replaced.add(name);
    }
  }
  for (const [name, line] of lines) if (!replaced.has(name)) out.push(line);
  const tmp = path.join(path.dirname(envFile), `.${path.basename(envFile)}.${process.pid}.tmp`);
  const fd = fs.openSync(tmp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
  try {
    fs.writeFileSync(fd, `${out.join('\n')}\n`);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, envFile);
  return carried;
}

/** The file's text when it is a regular file of this account; null when absent. A link or another owner's file is refused. */
function readOwnFile(file: string): string | null {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    throw new Error(
      `${file}: cannot be opened (${code === 'ELOOP' ? 'a symbolic link' : (code ?? String(err))}); remove it and install again`,
    );
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile() || st.uid !== process.getuid?.())
      throw new Error(`${file}: not a regular file of this account; remove it and install again`);
    return fs.readFileSync(fd, 'utf8');
  } finally {
    fs.closeSync(fd);
  }
}
