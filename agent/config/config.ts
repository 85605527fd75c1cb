import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { POOL_NAMES, type PoolName } from '../../shared/protocol';
import { ConfigError } from './configError';
import { redactSecretValue } from './redact';
import { SETTINGS, type Setting, type SettingName } from './settings';

export interface PoolConfig {
  slots: number;
  waitTimeoutSeconds: number;
  /** memory ceilings: the pool's ceiling, all its runs together. */
  memoryMb: number;
  /** CRON_POOL_<POOL>_RUN_TIMEOUT: seconds one try may run (0: none); a catalog entry's timeoutSeconds wins. */
  runTimeoutSeconds: number;
}

export interface DiskConfig {
  warnGb: number;
  pauseGb: number;
  resumeGb: number;
  pollSeconds: number;
  maxWaitSeconds: number;
}

/** The agent's whole configuration, validated. Every field comes from one setting in `settings.ts`. */
export interface Config {
  usePools: boolean;
  pools: Record<PoolName, PoolConfig>;
  disk: DiskConfig;
  dataDir: string;
  lockDir: string;
  /** QUANTILICA_LOCK_GROUP: the group sharing the lock folders, or null for this account alone. */
  lockGroup: string | null;
  homeDir: string;
  logDir: string;
  logCapBytes: number;
  catalogPath: string | null;
  cancelGraceSeconds: number;
  stopFetchersOnExit: boolean;
  /** Waiting runs end `cancelled` (agent-stopping) at an agent stop instead of waiting for the next agent. */
  cancelWaitingOnExit: boolean;
  telemetrySpool: string;
  databaseUrl: string | null;
  heartbeatSeconds: number;
  scheduleCatchUp: boolean;
  port: number;
  connectionFile: string;
  /** null: the default of the process (info for the agent, warn for the CLI). */
  logLevel: string | null;
  logFormat: 'auto' | 'json' | 'human';
  agentLogCapBytes: number;
  demo: { seconds: number; rateMb: number };
  /** How long and how many ended runs' logs and status files are kept (runs/retention.ts). */
  retention: { days: number; runs: number };
  /** memory ceilings: RAM kept out of the pools' ceilings, and the cgroup folder's name. */
  memory: { reserveMb: number; cgroupName: string | null; enforce: boolean };
  /** The slot backend, its PostgreSQL (null with `file`) and this station's name. */
  slots: { backend: 'file' | 'postgres'; databaseUrl: string | null; station: string };
  /** Who forks the agent's fetchers (runs/nativeSpawner.ts). */
  spawner: 'native' | 'thread';
  /** The operator event hook (QUANTILICA_ON_EVENT) and the Prometheus listener (QUANTILICA_METRICS_LISTEN). */
  onEvent: string | null;
  metricsListen: { host: string; port: number; explicit: boolean } | null;
  /** Where the values came from, for `quantilica status`. */
  configFile: string | null;
}

export type Env = Readonly<Record<string, string | undefined>>;

/**
 * Reads the settings from an optional JSON config file and the environment (the environment wins),
 * validates every value and returns the configuration, or throws one ConfigError listing every
 * problem with the variable, the bad value and what is allowed.
 */
export function loadConfig(env: Env = process.env): Config {
  const home = env.HOME && env.HOME.length > 0 ? env.HOME : os.homedir();
  const configFile = env.QUANTILICA_CONFIG ?? path.join(home, '.quantilica', 'config.json');
  const fromFile = readConfigFile(configFile, env.QUANTILICA_CONFIG !== undefined);
  const problems: string[] = [...fromFile.problems];
  const raw = (name: SettingName): string | undefined => env[name] ?? fromFile.values[name];

  const values = new Map<SettingName, unknown>();
  for (const setting of SETTINGS) {
    const text = raw(setting.name);
    const parsed = setting.parse(text === undefined || text === '' ? setting.default : text, home);
    if (parsed.ok) values.set(setting.name, parsed.value);
    else problems.push(`${setting.name}=${JSON.stringify('secret' in setting ? redactSecretValue(text ?? '') : text)}: ${parsed.error}`);
  }
  if (problems.length > 0) throw new ConfigError(problems);

  const get = <T>(name: SettingName): T => values.get(name) as T;
  const dataDir = get<string>('DATA_DIR');
  const disk: DiskConfig = {
    warnGb: get('CRON_DISK_WARN_GB'),
    pauseGb: get('CRON_DISK_PAUSE_GB'),
    resumeGb: get('CRON_DISK_RESUME_GB'),
    pollSeconds: get('CRON_DISK_POLL_SECONDS'),
    maxWaitSeconds: get('CRON_DISK_MAX_WAIT_SECONDS'),
  };
  // Hysteresis only works with pause < warn <= resume; anything else would flap or never resume.
  if (!(disk.pauseGb < disk.warnGb && disk.warnGb <= disk.resumeGb)) {
    throw new ConfigError([
      `CRON_DISK_PAUSE_GB=${disk.pauseGb}, CRON_DISK_WARN_GB=${disk.warnGb}, CRON_DISK_RESUME_GB=${disk.resumeGb}: ` +
        'must satisfy CRON_DISK_PAUSE_GB < CRON_DISK_WARN_GB <= CRON_DISK_RESUME_GB',
    ]);
  }
  const homeDir = get<string>('QUANTILICA_HOME');
  const pools = Object.fromEntries(
    POOL_NAMES.map((pool) => {
      const key = pool.toUpperCase().replace(/-/g, '_');
      return [
        pool,
        {
          slots: get<number>(`CRON_POOL_${key}_SLOTS`),
          waitTimeoutSeconds: get<number>(`CRON_POOL_${key}_TIMEOUT`),
          memoryMb: Math.round(get<number>(`CRON_POOL_${key}_MEMORY_GB`) * 1024), // memory ceilings
          runTimeoutSeconds: get<number>(`CRON_POOL_${key}_RUN_TIMEOUT`),
        },
      ];
    }),
  ) as Record<PoolName, PoolConfig>;

  const slotBackend = get<'file' | 'postgres'>('QUANTILICA_SLOT_BACKEND');
  const slotDatabaseUrl = get<string | null>('QUANTILICA_SLOT_DATABASE_URL') ?? get<string | null>('QUANTILICA_DATABASE_URL');
  if (slotBackend === 'postgres' && slotDatabaseUrl === null) {
    throw new ConfigError([
      'QUANTILICA_SLOT_BACKEND="postgres": needs QUANTILICA_SLOT_DATABASE_URL or QUANTILICA_DATABASE_URL (a direct PostgreSQL connection)',
    ]);
  }
  return {
    usePools: get('CRON_USE_POOLS'),
    pools,
    disk,
    dataDir,
    lockDir: get('QUANTILICA_LOCK_DIR'),
    lockGroup: get('QUANTILICA_LOCK_GROUP'),
    homeDir,
    logDir: get<string | null>('QUANTILICA_LOG_DIR') ?? path.join(dataDir, 'logs'),
    logCapBytes: Math.round(get<number>('QUANTILICA_LOG_CAP_MB') * 1024 * 1024),
    catalogPath: get('QUANTILICA_CATALOG'),
    cancelGraceSeconds: get('QUANTILICA_CANCEL_GRACE_SECONDS'),
    stopFetchersOnExit: get('QUANTILICA_STOP_FETCHERS_ON_EXIT'),
    cancelWaitingOnExit: get('QUANTILICA_CANCEL_WAITING_ON_EXIT'),
    telemetrySpool: get<string | null>('QUANTILICA_TELEMETRY_SPOOL') ?? path.join(homeDir, 'telemetry_spool.db'),
    databaseUrl: get('QUANTILICA_DATABASE_URL'),
    heartbeatSeconds: get('QUANTILICA_HEARTBEAT_SECONDS'),
    scheduleCatchUp: get('QUANTILICA_SCHEDULE_CATCH_UP'),
    port: get('QUANTILICA_PORT'),
    connectionFile: get<string | null>('QUANTILICA_CONNECTION_FILE') ?? path.join(homeDir, 'agent.json'),
    logLevel: get('QUANTILICA_LOG_LEVEL'),
    logFormat: get('QUANTILICA_LOG_FORMAT'),
    agentLogCapBytes: Math.round(get<number>('QUANTILICA_AGENT_LOG_CAP_MB') * 1024 * 1024),
    demo: { seconds: get('QUANTILICA_DEMO_SECONDS'), rateMb: get('QUANTILICA_DEMO_RATE_MB') },
    retention: { days: get('QUANTILICA_RETENTION_DAYS'), runs: get('QUANTILICA_RETENTION_RUNS') },
    memory: {
      reserveMb: Math.round(get<number>('QUANTILICA_MEMORY_RESERVE_GB') * 1024),
      cgroupName: get('QUANTILICA_CGROUP_NAME'),
      enforce: get('QUANTILICA_MEMORY_ENFORCE'),
    }, // memory ceilings
    slots: {
      backend: slotBackend,
      databaseUrl: slotBackend === 'postgres' ? slotDatabaseUrl : null,
      station: get<string | null>('QUANTILICA_STATION') ?? os.hostname(),
    },
    spawner: get<'native' | 'thread'>('QUANTILICA_SPAWNER'),
    onEvent: get('QUANTILICA_ON_EVENT'),
    metricsListen: get('QUANTILICA_METRICS_LISTEN'),
    configFile: fromFile.used ? configFile : null,
  };
}

interface FileValues {
  values: Partial<Record<SettingName, string>>;
  problems: string[];
  used: boolean;
}

function readConfigFile(file: string, explicit: boolean): FileValues {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // The default file is optional; a file named explicitly must exist.
    if (code === 'ENOENT' && !explicit) return { values: {}, problems: [], used: false };
    return { values: {}, problems: [`QUANTILICA_CONFIG=${JSON.stringify(file)}: cannot read (${code ?? String(err)})`], used: false };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    return { values: {}, problems: [`config file ${file}: not valid JSON (${(err as Error).message})`], used: false };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { values: {}, problems: [`config file ${file}: must be a JSON object of setting names to values`], used: false };
  }
  const envOnly = new Set<string>(SETTINGS.filter((s: Setting) => s.envOnly === true).map((s) => s.name));
  const known = new Set<string>(SETTINGS.map((s) => s.name).filter((name) => !envOnly.has(name)));
  const values: Partial<Record<SettingName, string>> = {};
  const problems: string[] = [];
  for (const [key, value] of Object.entries(parsed)) {
    if (envOnly.has(key)) {
      problems.push(`config file ${file}: ${key} is read from the environment only (set it there, e.g. in the service's agent.env)`);
    } else if (!known.has(key)) {
      problems.push(`config file ${file}: unknown setting ${JSON.stringify(key)} (known: ${[...known].join(', ')})`);
    } else if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') {
      values[key] = String(value);
    } else {
      problems.push(`config file ${file}: ${key} must be a string, number or boolean`);
    }
  }
  return { values, problems, used: true };
}
