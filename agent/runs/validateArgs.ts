import { GITHUB_REPO, type CatalogEntry } from '../catalog/catalog';
import { InvalidArgumentError } from '../errors';

const MAX_ARGS = 64;
const MAX_ARG_LENGTH = 4096;
/** A GitHub sync's arguments are its repositories for this run (`github sync --repos`), as many as a catalog's. */
const MAX_REPOS = 10000;

/**
 * Extra fetcher arguments come from clients: bounded, strings only, no NUL (argv cannot carry one),
 * and only as far as the catalog entry allows (`extraArgs`: false, the default, allows none; true
 * allows any; a pattern must match each argument whole).
 */
export function validateArgs(
  args: unknown,
  entry: { name: string; extraArgs?: boolean | string; kind?: CatalogEntry['kind'] } = { name: '?', extraArgs: true },
): asserts args is string[] {
  if (entry.kind === 'github-sync') {
    validateRepos(args, entry.name);
    return;
  }
  if (!Array.isArray(args) || args.length > MAX_ARGS)
    throw new InvalidArgumentError(`extra arguments must be a list of at most ${MAX_ARGS} strings`);
  for (const arg of args) {
    if (typeof arg !== 'string' || arg.length > MAX_ARG_LENGTH || arg.includes('\0')) {
      throw new InvalidArgumentError(`each extra argument must be a string of at most ${MAX_ARG_LENGTH} characters without NUL`);
    }
  }
  const allowed = entry.extraArgs ?? false;
  if (args.length === 0 || allowed === true) return;
  if (allowed === false) {
    throw new InvalidArgumentError(
      `the fetcher ${entry.name} takes no extra arguments (its catalog entry would need "extraArgs": true or a pattern)`,
    );
  }
  const pattern = new RegExp(`^(?:${allowed})$`, 'u');
  const bad = (args as string[]).findIndex((arg) => !pattern.test(arg));
  if (bad >= 0)
    throw new InvalidArgumentError(
      `extra argument ${bad + 1} of ${entry.name} does not match its catalog pattern ${JSON.stringify(allowed)}`,
    );
}

/** A github-sync run's arguments replace its entry's repositories: each an owner/name, none twice. */
function validateRepos(args: unknown, name: string): asserts args is string[] {
  if (!Array.isArray(args) || args.length > MAX_REPOS)
    throw new InvalidArgumentError(`the repositories of ${name} must be a list of at most ${MAX_REPOS}`);
  const bad = args.filter((a) => typeof a !== 'string' || !GITHUB_REPO.test(a));
  if (bad.length > 0)
    throw new InvalidArgumentError(
      `not a repository (owner/name): ${bad
        .slice(0, 5)
        .map((b) => JSON.stringify(b))
        .join(', ')}`,
    );
  if (new Set(args).size !== args.length) throw new InvalidArgumentError(`a repository of ${name} is given twice`);
}
