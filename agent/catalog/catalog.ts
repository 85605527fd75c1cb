import * as fs from 'node:fs';
import * as path from 'node:path';
import { z } from 'zod';
import { FETCHER_NAME, POOL_NAMES } from '../../shared/protocol';
import { ConfigError } from '../config/configError';
import { UnknownFetcherError } from '../errors';

const nameSchema = z
  .string()
  .regex(FETCHER_NAME, 'lowercase letters, digits, ".", "_" or "-", at most 64, starting with a letter or digit');

// Run policies of an entry: retries, a timeout, the stall watchdog (agent/runs/runPolicy.ts applies
// them). Bad values are refused at start, each with its field named.
export const RETRY_DEFAULTS = { backoffSeconds: 30, maxBackoffSeconds: 3600 } as const;

const retrySchema = z
  .object({
    /** Every try counts, the first included. */
    attempts: z.number().int().min(1).max(20),
    backoffSeconds: z
      .number()
      .nonnegative()
      .max(7 * 86400)
      .optional(),
    maxBackoffSeconds: z
      .number()
      .nonnegative()
      .max(7 * 86400)
      .optional(),
    /** The exit codes that retry; default any non-zero exit but 126 and 127 (the program cannot run). */
    exitCodes: z.array(z.number().int().min(1).max(255)).min(1).max(255).optional(),
  })
  .strict()
  .superRefine((r, ctx) => {
    const first = r.backoffSeconds ?? RETRY_DEFAULTS.backoffSeconds;
    if ((r.maxBackoffSeconds ?? Math.max(first, RETRY_DEFAULTS.maxBackoffSeconds)) < first) {
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        path: ['maxBackoffSeconds'],
        message: `must be at least the first delay (backoffSeconds ${first})`,
      });
    }
  });

const policyFields = {
  retry: retrySchema.optional(),
  /** A run the OOM killer ended at its ceiling is retried too (not by default). */
  retryMemoryLimit: z.boolean().optional(),
  /** A run ended by its timeout is retried too (not by default). */
  retryOnTimeout: z.boolean().optional(),
  /** Seconds a try may run; wins over CRON_POOL_<POOL>_RUN_TIMEOUT. 0: none. */
  timeoutSeconds: z
    .number()
    .int()
    .min(0)
    .max(30 * 86400)
    .optional(),
  /** Seconds without log growth after which the run is stalled; `onStall: cancel` then cancels it. */
  stallSeconds: z
    .number()
    .int()
    .min(1)
    .max(30 * 86400)
    .optional(),
  onStall: z.enum(['mark', 'cancel']).optional(),
};

/**
 * The dead man's switch of a scheduled entry: a due time with no completed run within this many minutes
 * after it makes the entry late until its next success (agent/schedule/lateness.ts). Fractions allowed.
 */
const lateness = {
  lateAfterMinutes: z
    .number()
    .positive()
    .max(366 * 24 * 60)
    .optional(),
};

const entrySchema = z
  .object({
    kind: z.literal('fetcher').optional(),
    ...policyFields,
    name: nameSchema,
    pool: z.enum(POOL_NAMES as [string, ...string[]]),
    argv: z.array(z.string().min(1)).min(1, 'argv needs at least the program'),
    env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string()).optional(),
    cwd: z
      .string()
      .refine((p) => path.isAbsolute(p), 'cwd must be an absolute path')
      .optional(),
    aliases: z.array(z.string().regex(FETCHER_NAME)).optional(),
    /** Expected download size of one run, for the disk gate's admission. */
    expectedSizeMb: z.number().nonnegative().optional(),
    /** memory ceilings: this fetcher's own ceiling per run, inside its pool's. */
    memoryMb: z.number().int().min(8).max(1e7).optional(),
    /** A cron expression (5 or 6 fields) for the 24-hour schedule, and its time zone. */
    schedule: z.string().min(1).optional(),
    timezone: z.string().min(1).optional(),
    ...lateness,
    /** Extra arguments clients may append: false (none, the default), true (any), or a pattern each must match. */
    extraArgs: z.union([z.boolean(), z.string().min(1).max(512).refine(isPattern, 'a valid regular expression')]).optional(),
    /** The agent's secrets (QUANTILICA_DATABASE_URL, GITHUB_TOKEN…) this fetcher gets; none by default. */
    passEnv: z
      .array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/))
      .max(64)
      .optional(),
  })
  .strict();

function isPattern(text: string): boolean {
  try {
    new RegExp(text, 'u');
    return true;
  } catch {
    return false;
  }
}

/** An owner/name of a GitHub repository. */
export const GITHUB_REPO = /^[A-Za-z0-9][A-Za-z0-9-]{0,38}\/(?!\.\.?$)[A-Za-z0-9_.-]{1,100}$/;

/**
 * A GitHub sync (ADR 0006) that runs inside the agent: it holds a network-light slot while it works
 * and none while it hibernates. Exactly one of `repos` and `reposFile` (one owner/name a line, `#`
 * comments), read at each start so an edit applies to the next sync.
 */
const githubSyncSchema = z
  .object({
    kind: z.literal('github-sync'),
    name: nameSchema,
    pool: z.literal('network-light'),
    repos: z.array(z.string().regex(GITHUB_REPO, 'owner/name')).min(1).max(10000).optional(),
    reposFile: z
      .string()
      .refine((p) => path.isAbsolute(p), 'reposFile must be an absolute path')
      .optional(),
    aliases: z.array(z.string().regex(FETCHER_NAME)).optional(),
    schedule: z.string().min(1).optional(),
    timezone: z.string().min(1).optional(),
    ...lateness,
    /** Seconds the sync may work (holding its slot), hibernations not counted; wins over CRON_POOL_NETWORK_LIGHT_RUN_TIMEOUT. 0: none. */
    timeoutSeconds: policyFields.timeoutSeconds,
    /** Tasks at once (ADR item 3); defaults to GITHUB_SYNC_CONCURRENCY. */
    concurrency: z.number().int().min(1).max(50).optional(),
  })
  .strict()
  .refine((e) => (e.repos === undefined) !== (e.reposFile === undefined), 'give exactly one of repos and reposFile');

const catalogSchema = z.object({ fetchers: z.array(z.unknown()).min(1) }).strict();

export type FetcherEntry = z.infer<typeof entrySchema> & { demo: boolean };
/** `simulated`: the demo's entry, run against the simulator the agent starts (never set from a catalog file). */
export type GithubSyncEntry = z.infer<typeof githubSyncSchema> & { demo: boolean; simulated?: boolean };
export type CatalogEntry = FetcherEntry | GithubSyncEntry;

export function isGithubSync(entry: CatalogEntry): entry is GithubSyncEntry {
  return entry.kind === 'github-sync';
}

/** Each entry is checked against the schema of its kind, so errors name the fields of that kind. */
function parseEntries(items: unknown[], source: string): CatalogEntry[] {
  const problems: string[] = [];
  const entries: CatalogEntry[] = [];
  items.forEach((item, i) => {
    const kind = typeof item === 'object' && item !== null ? (item as { kind?: unknown }).kind : undefined;
    if (kind !== undefined && kind !== 'fetcher' && kind !== 'github-sync') {
      problems.push(`catalog ${source}: fetchers.${i}.kind: allowed: fetcher, github-sync`);
      return;
    }
    const result = kind === 'github-sync' ? githubSyncSchema.safeParse(item) : entrySchema.safeParse(item);
    if (result.success) entries.push({ ...result.data, demo: false });
    else
      problems.push(
        ...result.error.issues.map(
          (iss) => `catalog ${source}: fetchers.${i}${iss.path.length > 0 ? `.${iss.path.join('.')}` : ''}: ${iss.message}`,
        ),
      );
  });
  if (problems.length > 0) throw new ConfigError(problems);
  return entries;
}

/** The fetchers the agent may run, by name or alias. Clients name a fetcher; they never send a command line. */
export class Catalog {
  private readonly byName = new Map<string, CatalogEntry>();

  constructor(
    readonly entries: readonly CatalogEntry[],
    readonly source: string,
  ) {
    for (const entry of entries) {
      for (const key of [entry.name, ...(entry.aliases ?? [])]) {
        if (this.byName.has(key)) throw new ConfigError([`catalog ${source}: the name ${JSON.stringify(key)} is used twice`]);
        this.byName.set(key, entry);
      }
    }
  }

  names(): string[] {
    return this.entries.map((e) => e.name);
  }

  /** The entry for a name or alias; throws UnknownFetcherError listing the valid names. */
  resolve(name: string): CatalogEntry {
    const entry = this.byName.get(name);
    if (!entry) throw new UnknownFetcherError(name, this.names());
    return entry;
  }

  static parse(json: unknown, source: string): Catalog {
    const result = catalogSchema.safeParse(json);
    if (!result.success) {
      throw new ConfigError(result.error.issues.map((i) => `catalog ${source}: ${i.path.join('.') || '(root)'}: ${i.message}`));
    }
    return new Catalog(parseEntries(result.data.fetchers, source), source);
  }

  static load(file: string): Catalog {
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (err) {
      throw new ConfigError([
        `QUANTILICA_CATALOG=${JSON.stringify(file)}: cannot read (${(err as NodeJS.ErrnoException).code ?? String(err)})`,
      ]);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw new ConfigError([`QUANTILICA_CATALOG=${JSON.stringify(file)}: not valid JSON (${(err as Error).message})`]);
    }
    const catalog = Catalog.parse(json, file);
    // A missing working directory would end each run with exit 127 ("command not found") from the
    // spawn: refuse the catalog at start instead, with every such entry listed.
    const problems = catalog.entries.flatMap((entry, i) => {
      if (isGithubSync(entry) || entry.cwd === undefined) return [];
      try {
        return fs.statSync(entry.cwd).isDirectory()
          ? []
          : [`catalog ${file}: fetchers.${i}.cwd: ${entry.cwd} is not a directory (cwd-missing)`];
      } catch (err) {
        return [
          `catalog ${file}: fetchers.${i}.cwd: ${entry.cwd} cannot be used (${(err as NodeJS.ErrnoException).code ?? String(err)}; cwd-missing)`,
        ];
      }
    });
    if (problems.length > 0) throw new ConfigError(problems);
    return catalog;
  }
}
