import type pgModule from 'pg';

let loaded: typeof pgModule | null = null;

/**
 * node-postgres, loaded on first use rather than with the agent: loading it asks whether it runs in a
 * Cloudflare Worker by touching `Response`, which makes Node 20 load its whole fetch implementation
 * (60–100 ms on a 2-core station). Every CLI call and every agent without a database paid that.
 */
export function loadPg(): typeof pgModule {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  loaded ??= require('pg') as typeof pgModule;
  return loaded;
}
