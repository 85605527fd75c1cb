import type { Migration } from './migration';
import { migration001 } from '../telemetry/migrations/001_core_telemetry';
import { migration002 } from '../telemetry/migrations/002_run_memory';
import { migration003 } from '../slots/migrations/003_slot_backend';
import { migration004 } from '../slots/migrations/004_run_cancel';
import { migration005 } from '../telemetry/migrations/005_run_attempts';
import { migration006 } from '../slots/migrations/006_take_slot';

/**
 * Every migration of the one PostgreSQL schema, in order, whichever part owns it (the telemetry its
 * tables in agent/telemetry/migrations/, the postgres slot backend its own in agent/slots/migrations/).
 * One numbered list, recorded by version in core.schema_migration and applied whole by whoever connects
 * first: an agent of an older release skips migrating once the highest version it knows is recorded,
 * so a part's migrations are never applied on their own. Append new ones with the next version; never
 * edit or reorder a released one.
 */
export const MIGRATIONS: readonly Migration[] = [migration001, migration002, migration003, migration004, migration005, migration006];
