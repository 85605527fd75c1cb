import { SECRET_SETTINGS } from '../config/settings';

/** The agent's own secrets, as the settings table marks them: a fetcher gets one only if its catalog
 * entry names it in `passEnv`. */
export const AGENT_SECRETS: readonly string[] = SECRET_SETTINGS;

export interface FetcherEnvInput {
  /** The agent's environment. */
  base: NodeJS.ProcessEnv;
  /** From the catalog entry: variables it sets, and agent variables it asks for by name. */
  entryEnv?: Record<string, string>;
  passEnv?: readonly string[];
  /** What the run gets in any case (DATA_DIR, QUANTILICA_RUN_ID, …). */
  run: Record<string, string>;
  /** The umask the agent was started with (octal text); the wrapper restores it for the fetcher,
   * whose data is its own business, while everything the agent writes stays private (077). */
  fetcherUmask: string;
}

/** The environment of one fetcher: the agent's, minus its secrets unless asked for, plus the entry's and the run's. */
export function fetcherEnv(input: FetcherEnvInput): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...input.base };
  const passed = new Set(input.passEnv ?? []);
  for (const name of AGENT_SECRETS) if (!passed.has(name)) delete env[name];
  return { ...env, ...input.entryEnv, ...input.run, QUANTILICA_FETCHER_UMASK: input.fetcherUmask };
}

/** Why a spawn is refused when a NUL byte would cut an argument or a variable short. */
export const NUL_REFUSED = 'a spawn argument or environment value contains a NUL byte';

/**
 * The variables every run of one catalog entry gets (the agent's environment less its secrets, the
 * entry's own, the run's constant ones), built once per entry: copying the agent's environment and
 * encoding it for the native spawner was a large part of a run's start. A run adds its own variables
 * (SpawnOptions.env), which are never among these.
 */
export interface SharedEnv {
  vars: Readonly<Record<string, string>>;
  /** `vars` as the native spawner reads them: each `NAME=value` followed by a NUL. */
  encoded: Uint8Array;
  count: number;
}

/** `fetcherEnv(input)` without the variables named in `own` (the run's own), encoded once. */
export function sharedFetcherEnv(input: FetcherEnvInput, own: ReadonlySet<string>): SharedEnv {
  const vars: Record<string, string> = {};
  let text = '';
  let count = 0;
  for (const [name, value] of Object.entries(fetcherEnv(input))) {
    if (value === undefined || own.has(name)) continue;
    if (name.includes('\0') || value.includes('\0')) throw new Error(NUL_REFUSED);
    vars[name] = value;
    text += `${name}=${value}\0`;
    count += 1;
  }
  return { vars, encoded: Buffer.from(text, 'utf8'), count };
}
