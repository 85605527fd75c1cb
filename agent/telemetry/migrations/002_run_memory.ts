import type { Migration } from '../../db/migration';

// memory ceilings: each run's peak memory (MB) and CPU time (seconds), from its finish event
// (its cgroup's counters, or samples of /proc; the event's payload says which: memorySource).
export const migration002: Migration = {
  version: 2,
  name: 'run_memory',
  sql: `
ALTER TABLE core.task_run ADD COLUMN peak_memory_mb double precision, ADD COLUMN cpu_seconds double precision;
`,
};
