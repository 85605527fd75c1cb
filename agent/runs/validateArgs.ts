import { InvalidArgumentError } from '../errors';

const MAX_ARGS = 64;
const MAX_ARG_LENGTH = 4096;

/** Extra fetcher arguments come from clients: bounded, strings only, no NUL (argv cannot carry one). */
export function validateArgs(args: unknown): asserts args is string[] {
  if (!Array.isArray(args) || args.length > MAX_ARGS) throw new InvalidArgumentError(`extra arguments must be a list of at most ${MAX_ARGS} strings`);
  for (const arg of args) {
    if (typeof arg !== 'string' || arg.length > MAX_ARG_LENGTH || arg.includes('\0')) {
      throw new InvalidArgumentError(`each extra argument must be a string of at most ${MAX_ARG_LENGTH} characters without NUL`);
    }
  }
}
