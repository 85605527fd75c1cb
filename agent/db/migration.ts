/**
 * One step of the PostgreSQL schema. Append-only: a released migration is never edited, only followed.
 * Its own module, so that a part's migrations and the list of them (`migrations.ts`) need not import
 * each other.
 */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}
