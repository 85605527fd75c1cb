import { isIP } from 'node:net';
import * as path from 'node:path';
import { hasControlCharacter } from './hasControlCharacter';

export type Parsed = { ok: true; value: unknown } | { ok: false; error: string };

export interface Setting {
  name: string;
  default: string;
  description: string;
  parse(text: string, home: string): Parsed;
  /** The value is a secret (a password, a token): messages redact it, fetchers get it only through
   * `passEnv`, `service install` writes it only with `--with-secrets`. */
  secret?: boolean;
  /** Read from the environment alone, by the part that uses it (the GitHub client, pg): a config file
   * that names it is refused rather than silently ignored. */
  envOnly?: boolean;
}

const bool = (text: string): Parsed => {
  const t = text.trim().toLowerCase();
  if (['true', '1', 'yes', 'on'].includes(t)) return { ok: true, value: true };
  if (['false', '0', 'no', 'off'].includes(t)) return { ok: true, value: false };
  return { ok: false, error: 'allowed: true, false, 1, 0, yes, no, on, off' };
};

const number =
  (min: number, max: number, integer: boolean) =>
  (text: string): Parsed => {
    const t = text.trim();
    // Number('') is 0 and Number(' 1e3 ') is 1000: accept plain decimals only.
    if (!/^-?\d+(\.\d+)?$/.test(t))
      return { ok: false, error: `allowed: ${integer ? 'a whole number' : 'a decimal number'} from ${min} to ${max}` };
    const n = Number(t);
    if (integer && !Number.isInteger(n)) return { ok: false, error: `allowed: a whole number from ${min} to ${max}` };
    if (n < min || n > max) return { ok: false, error: `allowed: from ${min} to ${max}` };
    return { ok: true, value: n };
  };

const dir = (text: string, home: string): Parsed => {
  const t = text.trim();
  if (t.includes('\0')) return { ok: false, error: 'allowed: a path without NUL bytes' };
  const expanded = t === '~' ? home : t.startsWith('~/') ? path.join(home, t.slice(2)) : t;
  if (!path.isAbsolute(expanded)) return { ok: false, error: 'allowed: an absolute path (or one starting with ~/)' };
  return { ok: true, value: path.normalize(expanded) };
};

const optionalDir = (text: string, home: string): Parsed => (text === '' ? { ok: true, value: null } : dir(text, home));

const groupName = (text: string): Parsed => {
  const t = text.trim();
  if (t === '') return { ok: true, value: null };
  if (!/^[a-z_][a-z0-9_.-]{0,31}\$?$|^\d+$/i.test(t)) return { ok: false, error: 'allowed: a group name or number (getent group)' };
  return { ok: true, value: t };
};

const optionalUrl = (text: string): Parsed => {
  if (text === '') return { ok: true, value: null };
  const allowed =
    'allowed: a postgres:// or postgresql:// URL with a host (postgres://HOST:5432/DB, credentials as USER:PASSWORD@ before the host), special characters percent-encoded';
  if (!/^postgres(ql)?:\/\//.test(text)) return { ok: false, error: allowed };
  // An @ after a /, ? or # means a password with those characters unencoded: the URL would name
  // another host (part of the password), so it is refused rather than connected to.
  const authorityEnd = text.slice(text.indexOf('//') + 2).search(/[/?#]/);
  if (authorityEnd >= 0 && text.lastIndexOf('@') > text.indexOf('//') + 2 + authorityEnd) {
    return { ok: false, error: `${allowed}; a / ? # or @ in the password must be percent-encoded (%2F %3F %23 %40)` };
  }
  let url: URL;
  try {
    url = new URL(text);
    // A malformed escape in the user or password would fail later, inside pg: check it now.
    decodeURIComponent(url.username);
    decodeURIComponent(url.password);
    decodeURIComponent(url.pathname);
  } catch {
    return { ok: false, error: allowed };
  }
  // An empty host makes pg connect to its own default (localhost:5432): never what was meant.
  if (url.hostname === '' && !url.searchParams.has('host')) return { ok: false, error: `${allowed}; the host is missing` };
  return { ok: true, value: text };
};

// A token or password taken as it is; only a control character (a pasted newline) is refused.
const optionalSecret = (text: string): Parsed =>
  hasControlCharacter(text)
    ? { ok: false, error: 'allowed: text without control characters (a newline, a tab)' }
    : { ok: true, value: text === '' ? null : text };

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const optionalLevel = (text: string): Parsed => {
  if (text === '') return { ok: true, value: null };
  const t = text.trim().toLowerCase();
  return LOG_LEVELS.includes(t) ? { ok: true, value: t } : { ok: false, error: `allowed: ${LOG_LEVELS.join(', ')}` };
};

const logFormat = (text: string): Parsed => {
  const t = text.trim().toLowerCase();
  return t === 'auto' || t === 'json' || t === 'human' ? { ok: true, value: t } : { ok: false, error: 'allowed: auto, human, json' };
};

// Where slots live. `file`: flock(2) files on this station; `postgres`: advisory locks in a
// PostgreSQL shared by several stations (agent/slots/pgSlotPool.ts).
const slotBackend = (text: string): Parsed => {
  const t = text.trim().toLowerCase();
  return t === 'file' || t === 'postgres' ? { ok: true, value: t } : { ok: false, error: 'allowed: file, postgres' };
};

// Who forks the fetchers. `native`: the small spawner process (agent/native), when it was
// built and the kernel lets it take the agent's descriptors; `thread`: the agent's worker thread.
const spawnerKind = (text: string): Parsed => {
  const t = text.trim().toLowerCase();
  return t === 'native' || t === 'thread' ? { ok: true, value: t } : { ok: false, error: 'allowed: native, thread' };
};

// The name other stations see for this one (default: the host name).
const stationName = (text: string): Parsed => {
  const t = text.trim();
  return /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/.test(t)
    ? { ok: true, value: t }
    : { ok: false, error: 'allowed: 1 to 63 letters, digits, ".", "_", "-", starting with a letter or digit' };
};

const poolSettings = (key: string, slots: number): Setting[] => [
  { name: `CRON_POOL_${key}_SLOTS`, default: String(slots), description: `slots of the pool`, parse: number(1, 256, true) },
  {
    name: `CRON_POOL_${key}_TIMEOUT`,
    default: '21600',
    description: 'seconds a run waits for a slot before failing',
    parse: number(1, 7 * 86400, true),
  },
  {
    name: `CRON_POOL_${key}_RUN_TIMEOUT`,
    default: '0',
    description: "seconds one try of a run may take before it is stopped (failed, timeout); 0: none; a catalog entry's timeoutSeconds wins",
    parse: number(0, 30 * 86400, true),
  },
];

// memory ceilings
const poolMemorySetting = (key: string, gb: number): Setting => ({
  name: `CRON_POOL_${key}_MEMORY_GB`,
  default: String(gb),
  description: 'memory ceiling of the pool in GB (all its runs together), enforced by a cgroup',
  parse: number(0.01, 1e5, false),
});

const cgroupName = (text: string): Parsed => {
  const t = text.trim();
  if (t === '') return { ok: true, value: null };
  if (!/^[a-z0-9][a-z0-9._-]{0,63}$/i.test(t))
    return { ok: false, error: 'allowed: letters, digits, ".", "_" or "-", at most 64, starting with a letter or digit' };
  return { ok: true, value: t };
};

// The operator event hook: an absolute path (that it is an executable file is checked at start,
// agent/events/checkEventHook.ts).
const optionalProgram = (text: string): Parsed => {
  const t = text.trim();
  if (t === '') return { ok: true, value: null };
  if (t.includes('\0') || !path.isAbsolute(t))
    return { ok: false, error: 'allowed: an absolute path to an executable file (run with no shell and no arguments)' };
  return { ok: true, value: path.normalize(t) };
};

// The Prometheus listener: HOST:PORT or a port alone (then 127.0.0.1); an IPv6 host in brackets.
const optionalListen = (text: string): Parsed => {
  const t = text.trim();
  if (t === '') return { ok: true, value: null };
  const allowed = 'allowed: PORT, HOST:PORT or [IPV6]:PORT (an IP address; PORT from 0 to 65535, 0 picks a free one), e.g. 127.0.0.1:9464';
  const m = /^(?:(\[[0-9A-Fa-f:.]+\]|[0-9.]+):)?(\d{1,5})$/.exec(t);
  if (!m) return { ok: false, error: allowed };
  const port = Number(m[2]);
  if (port > 65535) return { ok: false, error: allowed };
  const host = m[1] === undefined ? '127.0.0.1' : m[1].replace(/^\[|\]$/g, '');
  if (isIP(host) === 0) return { ok: false, error: allowed };
  return { ok: true, value: { host, port, explicit: m[1] !== undefined } };
};

/** Every setting the agent reads, from the environment or the config file, with its default. */
export const SETTINGS = [
  {
    name: 'CRON_USE_POOLS',
    default: 'false',
    description: 'use the three pools; false is the serial compatibility mode (one global lock)',
    parse: bool,
  },
  ...poolSettings('HEAVY_IO', 3),
  ...poolSettings('CPU_ANALYSIS', 2),
  ...poolSettings('NETWORK_LIGHT', 6),
  // memory ceilings
  poolMemorySetting('HEAVY_IO', 12),
  poolMemorySetting('CPU_ANALYSIS', 12),
  poolMemorySetting('NETWORK_LIGHT', 3),
  {
    name: 'QUANTILICA_MEMORY_RESERVE_GB',
    default: '5',
    description:
      "GB of the machine's RAM the pools' ceilings must leave for the system, the page cache and PostgreSQL (checked at start; a warning, not a refusal)",
    parse: number(0, 1e5, false),
  },
  {
    name: 'QUANTILICA_MEMORY_ENFORCE',
    default: 'true',
    description:
      'enforce the memory ceilings with cgroups where the machine allows; false runs without (reported as not enforced, memory sampled)',
    parse: bool,
  },
  {
    name: 'QUANTILICA_CGROUP_NAME',
    default: '',
    description: "the agent's cgroup folder under the memory controller (default quantilica-<uid>-<hash of QUANTILICA_HOME>, one per home)",
    parse: cgroupName,
  },
  { name: 'CRON_DISK_WARN_GB', default: '25', description: 'free GB below which the disk gate warns', parse: number(0, 1e6, false) },
  { name: 'CRON_DISK_PAUSE_GB', default: '10', description: 'free GB below which no fetcher starts', parse: number(0, 1e6, false) },
  {
    name: 'CRON_DISK_RESUME_GB',
    default: '35',
    description: 'free GB at or above which a paused gate opens again',
    parse: number(0, 1e6, false),
  },
  {
    name: 'CRON_DISK_POLL_SECONDS',
    default: '15',
    description: 'seconds between disk checks while paused',
    parse: number(0.01, 3600, false),
  },
  {
    name: 'CRON_DISK_MAX_WAIT_SECONDS',
    default: '3600',
    description: 'seconds a run waits at a paused gate before failing',
    parse: number(0.01, 7 * 86400, false),
  },
  { name: 'DATA_DIR', default: '~/data', description: 'where fetchers write their data', parse: dir },
  { name: 'QUANTILICA_LOCK_DIR', default: '/tmp/quantilica_locks', description: 'slot lock files', parse: dir },
  {
    name: 'QUANTILICA_LOCK_GROUP',
    default: '',
    description: 'a group whose members share the lock folders (folders 2770, files 0660); empty: this account alone (0700, 0600)',
    parse: groupName,
  },
  { name: 'QUANTILICA_HOME', default: '~/.quantilica', description: "the agent's state, connection file and spool", parse: dir },
  { name: 'QUANTILICA_LOG_DIR', default: '', description: 'per-run logs (default DATA_DIR/logs)', parse: optionalDir },
  { name: 'QUANTILICA_LOG_CAP_MB', default: '20', description: 'size cap of one run log in MB', parse: number(0.01, 100000, false) },
  { name: 'QUANTILICA_CATALOG', default: '', description: 'the fetcher catalog (JSON); empty runs the demo catalog', parse: optionalDir },
  {
    name: 'QUANTILICA_CANCEL_GRACE_SECONDS',
    default: '30',
    description: 'seconds between SIGTERM and SIGKILL on cancel',
    parse: number(0, 3600, false),
  },
  {
    name: 'QUANTILICA_STOP_FETCHERS_ON_EXIT',
    default: 'false',
    description: 'cancel running fetchers when the agent gets SIGTERM',
    parse: bool,
  },
  {
    name: 'QUANTILICA_CANCEL_WAITING_ON_EXIT',
    default: 'false',
    description: 'cancel waiting runs when the agent stops (by default the next agent resumes them in order)',
    parse: bool,
  },
  {
    name: 'QUANTILICA_TELEMETRY_SPOOL',
    default: '',
    description: 'the SQLite spool (default QUANTILICA_HOME/telemetry_spool.db)',
    parse: optionalDir,
  },
  {
    name: 'QUANTILICA_DATABASE_URL',
    default: '',
    description: 'PostgreSQL for telemetry; empty keeps events in the spool',
    parse: optionalUrl,
    secret: true,
  },
  {
    name: 'QUANTILICA_SLOT_BACKEND',
    default: 'file',
    description: 'where slots live: file (flock on this station) or postgres (advisory locks shared by stations)',
    parse: slotBackend,
  },
  {
    name: 'QUANTILICA_SLOT_DATABASE_URL',
    default: '',
    description: 'PostgreSQL of the postgres slot backend, a direct connection (default QUANTILICA_DATABASE_URL)',
    parse: optionalUrl,
    secret: true,
  },
  {
    name: 'QUANTILICA_STATION',
    default: '',
    description: "this station's name in the shared slot tables (default the host name)",
    parse: (t: string) => (t === '' ? { ok: true, value: null } : stationName(t)),
  },
  {
    name: 'QUANTILICA_SPAWNER',
    default: 'native',
    description:
      'who starts fetchers: native (a small spawner process; the thread when it cannot be used) or thread (a worker thread of the agent)',
    parse: spawnerKind,
  },
  {
    name: 'QUANTILICA_HEARTBEAT_SECONDS',
    default: '60',
    description: 'seconds between heartbeat events of a running fetcher',
    parse: number(0.05, 86400, false),
  },
  { name: 'QUANTILICA_SCHEDULE_CATCH_UP', default: 'true', description: 'run overdue fetchers once at start', parse: bool },
  {
    name: 'QUANTILICA_PORT',
    default: '0',
    description: 'loopback port of the protocol (0 picks a free one)',
    parse: number(0, 65535, true),
  },
  { name: 'QUANTILICA_DEMO_SECONDS', default: '30', description: 'how long a demo fetcher runs', parse: number(0, 86400, false) },
  {
    name: 'QUANTILICA_DEMO_RATE_MB',
    default: '1',
    description: 'MB per second a demo fetcher writes into DATA_DIR',
    parse: number(0, 10000, false),
  },
  {
    name: 'QUANTILICA_RETENTION_DAYS',
    default: '14',
    description: 'days run logs, exit-status files and rows of ended runs are kept',
    parse: number(0.001, 36500, false),
  },
  {
    name: 'QUANTILICA_RETENTION_RUNS',
    default: '5000',
    description: 'most ended runs whose log, exit-status file and row are kept (newest first)',
    parse: number(1, 10000000, true),
  },
  {
    name: 'QUANTILICA_LOG_LEVEL',
    default: '',
    description: 'the log level (default info for the agent, warn for the CLI)',
    parse: optionalLevel,
  },
  {
    name: 'QUANTILICA_LOG_FORMAT',
    default: 'auto',
    description: 'the log of the agent and the CLI: json lines, or human lines; auto is human on a terminal',
    parse: logFormat,
  },
  {
    name: 'QUANTILICA_AGENT_LOG_CAP_MB',
    default: '10',
    description: "cap of the agent's own log when its stderr is a file (rotated to <file>.1)",
    parse: number(0.01, 100000, false),
  },
  {
    name: 'GITHUB_TOKEN',
    default: '',
    description: "the GitHub sync's token (read from the environment)",
    parse: optionalSecret,
    secret: true,
    envOnly: true,
  },
  {
    name: 'PGPASSWORD',
    default: '',
    description: 'the password pg uses when a database URL has none (read from the environment by pg)',
    parse: optionalSecret,
    secret: true,
    envOnly: true,
  },
  {
    name: 'QUANTILICA_TEST_DATABASE_URL',
    default: '',
    description: "the test suite's PostgreSQL (test/support/postgres.ts); the agent never uses it, and never hands it on",
    parse: optionalSecret,
    secret: true,
    envOnly: true,
  },
  {
    name: 'QUANTILICA_ON_EVENT',
    default: '',
    description:
      'a program run (no shell, no arguments, 30 s at most) for each operator event: failed, retrying, timeout, stalled, late, recovered, disk-paused, disk-resumed, sync-hibernated, sync-not-reached',
    parse: optionalProgram,
  },
  {
    name: 'QUANTILICA_METRICS_LISTEN',
    default: '',
    description: 'where the agent serves Prometheus metrics (GET /metrics): PORT (on 127.0.0.1) or HOST:PORT; empty: not served',
    parse: optionalListen,
  },
  {
    name: 'QUANTILICA_CONNECTION_FILE',
    default: '',
    description: 'port and token of the running agent (default QUANTILICA_HOME/agent.json)',
    parse: optionalDir,
  },
] as const satisfies readonly Setting[];

export type SettingName = (typeof SETTINGS)[number]['name'];

/** The names of the settings marked secret: the one list every part that withholds secrets uses. */
export const SECRET_SETTINGS: readonly SettingName[] = SETTINGS.filter((s: Setting) => s.secret === true).map((s) => s.name);
