import { migration001 } from './001_core_telemetry';
import { migration002 } from './002_run_memory';
import { migration003 } from './003_slot_backend';
import { migration004 } from './004_run_cancel';
import { migration005 } from './005_run_attempts';

/** One step of the PostgreSQL schema. Append-only: a released migration is never edited, only followed. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Every migration, in order. Append new ones; never edit or reorder a released one. */
export const MIGRATIONS: readonly Migration[] = [migration001, migration002, migration003, migration004, migration005];
