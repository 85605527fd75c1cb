import type { Command } from 'commander';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { didYouMean } from './closestWord';

/**
 * Makes a command tree strict, with the CLI's voice: a word no command declares (`schedule puase`,
 * `status extra`) is a usage error naming the closest valid word, never silently ignored, and
 * commander's own errors read like every other message (`quantilica: unknown option '--bogus'; did
 * you mean --status?`). Installed on the root, before the subcommands are added: they inherit the
 * output settings, and the root's hook runs before every action.
 */
export function makeStrict(program: Command): Command {
  return (
    program
      .showSuggestionAfterError(true)
      .configureOutput({ writeErr: (s) => process.stderr.write(s), outputError: (s, write) => write(cliErrorText(s)) })
      // Commander's own check (allowExcessArguments(false)) cannot tell a mistyped subcommand of a command
      // that also acts alone (`schedule`, the root with --flush) from a stray word; this one can.
      .hook('preAction', (_root, action) => refuseStrayWords(action))
  );
}

/** `error: unknown option '--x'\n(Did you mean --y?)` → `quantilica: unknown option '--x'; did you mean --y?`. */
export function cliErrorText(text: string): string {
  const body = text
    .trimEnd()
    .replace(/^error: /, '')
    .replace(/\n\(Did you mean (.+)\?\)$/, '; did you mean $1?');
  return `quantilica: ${body}\n`;
}

function refuseStrayWords(command: Command): void {
  const declared = command.registeredArguments;
  if (declared.at(-1)?.variadic) return;
  const stray = command.args.slice(declared.length);
  const first = stray[0];
  if (first === undefined) return;
  const path = commandPath(command);
  const help = `see \`${['quantilica', ...path].join(' ')} --help\``;
  const subcommands = command
    .createHelp()
    .visibleCommands(command)
    .map((c) => c.name())
    .filter((name) => name !== 'help');
  if (subcommands.length > 0 && declared.length === 0) {
    const where = path.length > 0 ? ` for '${path.join(' ')}'` : '';
    const hint = didYouMean(first, subcommands) || `; allowed: ${subcommands.join(', ')}`;
    throw new ClientError(0, ExitCode.usage, `unknown command '${first}'${where}${hint}`);
  }
  const takes =
    declared.length === 0
      ? 'takes no arguments'
      : `takes at most ${declared.length} argument${declared.length === 1 ? '' : 's'} (${declared.map((a) => a.name()).join(', ')})`;
  throw new ClientError(0, ExitCode.usage, `'${path.join(' ')}' ${takes}; unexpected ${stray.map((w) => `'${w}'`).join(' ')}; ${help}`);
}

/** `['schedule', 'pause']` for `quantilica schedule pause`; empty for the root. */
function commandPath(command: Command): string[] {
  const names: string[] = [];
  for (let c: Command | null = command; c?.parent; c = c.parent) names.unshift(c.name());
  return names;
}
