import type { Migration } from '../../db/migration';

// Retries: a run is one row however many tries it took; `attempts` is how many it made (the highest
// `attempt` its start and finish events carry). Runs without a retry policy make one.
export const migration005: Migration = {
  version: 5,
  name: 'run_attempts',
  sql: `
ALTER TABLE core.task_run ADD COLUMN attempts integer NOT NULL DEFAULT 1;
`,
};
