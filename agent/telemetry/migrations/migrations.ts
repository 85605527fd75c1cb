import { migration001 } from './001_core_telemetry';
import { migration002 } from './002_run_memory';
import type { Migration } from './migration';

/** Every migration, in order. Append new ones; never edit or reorder a released one. */
export const MIGRATIONS: readonly Migration[] = [migration001, migration002];
