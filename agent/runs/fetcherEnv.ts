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
