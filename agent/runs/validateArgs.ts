import { InvalidArgumentError } from '../errors';

const MAX_ARGS = 64;
const MAX_ARG_LENGTH = 4096;

/**
 * Extra fetcher arguments come from clients: bounded, strings only, no NUL (argv cannot carry one),
 * and only as far as the catalog entry allows (`extraArgs`: false, the default, allows none; true
 * allows any; a pattern must match each argument whole).
 */
export function validateArgs(args: unknown, entry: { name: string; extraArgs?: boolean | string } = { name: '?', extraArgs: true }): asserts args is string[] {
  if (!Array.isArray(args) || args.length > MAX_ARGS) throw new InvalidArgumentError(`extra arguments must be a list of at most ${MAX_ARGS} strings`);
  for (const arg of args) {
    if (typeof arg !== 'string' || arg.length > MAX_ARG_LENGTH || arg.includes('\0')) {
      throw new InvalidArgumentError(`each extra argument must be a string of at most ${MAX_ARG_LENGTH} characters without NUL`);
    }
  }
  const allowed = entry.extraArgs ?? false;
  if (args.length === 0 || allowed === true) return;
  if (allowed === false) {
    throw new InvalidArgumentError(`the fetcher ${entry.name} takes no extra arguments (its catalog entry would need "extraArgs": true or a pattern)`);
  }
  const pattern = new RegExp(`^(?:${allowed})$`, 'u');
  const bad = (args as string[]).findIndex((arg) => !pattern.test(arg));
  if (bad >= 0) throw new InvalidArgumentError(`extra argument ${bad + 1} of ${entry.name} does not match its catalog pattern ${JSON.stringify(allowed)}`);
}
