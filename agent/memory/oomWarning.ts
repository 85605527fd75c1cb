/** The warning of a run inside which the OOM killer took processes (the fetcher may still exit 0). */
export function oomWarning(oomKills: number): string {
  return `WARNING: ${oomKills} process${oomKills === 1 ? '' : 'es'} of the run killed at its memory ceiling (OOM)`;
}
