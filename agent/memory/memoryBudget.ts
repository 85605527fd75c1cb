import * as os from 'node:os';

/**
 * The seed sizes pools by RAM: their ceilings together must leave the reserve (system, page cache,
 * PostgreSQL). A station that cannot is told at start, in the log and in `status`, and still runs:
 * each pool's ceiling is still enforced; only the sum may overcommit. Returns null when it fits.
 */
export function memoryBudgetWarning(
  ceilingsMb: readonly number[],
  reserveMb: number,
  totalMb = Math.floor(os.totalmem() / (1024 * 1024)),
): string | null {
  const sum = ceilingsMb.reduce((a, b) => a + b, 0);
  if (sum + reserveMb <= totalMb) return null;
  const gb = (mb: number) => `${Math.round((mb / 1024) * 10) / 10} GB`;
  return (
    `the pools' memory ceilings (${gb(sum)}) plus the reserve (${gb(reserveMb)}) exceed this machine's RAM (${gb(totalMb)}): ` +
    'the pools together may push the station into swap or the OOM killer; lower CRON_POOL_*_MEMORY_GB or QUANTILICA_MEMORY_RESERVE_GB'
  );
}
