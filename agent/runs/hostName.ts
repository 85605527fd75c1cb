import * as os from 'node:os';

/** How long a read of the machine's name is reused: a rename shows in the events within this. */
const REREAD_MS = 60_000;

let cached: { name: string; at: number } | null = null;

/**
 * The machine's name for a run's start event, read again at most once a minute: each read is a
 * uname(2) on the agent's main thread, once per run in a burst, for a name that hardly ever changes.
 */
export function hostName(now = performance.now()): string {
  if (cached === null || now - cached.at >= REREAD_MS) cached = { name: os.hostname(), at: now };
  return cached.name;
}
