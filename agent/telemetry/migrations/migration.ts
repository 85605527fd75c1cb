/** One step of the PostgreSQL schema. Append-only: a released migration is never edited, only followed. */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}
