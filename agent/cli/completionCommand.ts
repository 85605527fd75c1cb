import type { Command, Option } from 'commander';
import { Catalog } from '../catalog/catalog';
import { demoCatalog } from '../catalog/demoCatalog';
import { loadConfig } from '../config/config';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { RUN_STATUSES } from '../../shared/protocol';
import { openRemoteLink } from './openLink';

/**
 * Where the candidates for a value come from, by the option's or argument's name; a key with the
 * command's path first (`telemetry emit --status`) is for that command alone. A value with no
 * source (`--limit`, a fetcher's own arguments) gets none, and the shell falls back to file names.
 */
const VALUE_SOURCES: Record<string, () => Promise<string[]> | string[]> = {
  '--status': () => [...RUN_STATUSES],
  'telemetry emit --status': () => ['completed', 'failed', 'cancelled'],
  '--fetcher': () => fetcherNames(),
  '--task': () => fetcherNames(),
  '--pool': () => ['heavy-io', 'cpu-analysis', 'network-light'],
  '--run': () => runIds(),
  '--run-id': () => runIds(),
  fetcher: () => fetcherNames(),
  target: async () => [...fetcherNames(), ...(await runIds())],
  shell: () => ['bash', 'zsh'],
  event: () => ['start', 'heartbeat', 'finish'],
};

/**
 * `quantilica completion bash|zsh` prints a completion script; the script asks the hidden
 * `quantilica __complete -- <index> <words…>` for candidates (after `--`, so that the words, options
 * among them, reach it as they are), so fetcher names come from the catalog
 * the agent uses and run ids from the running agent (when one answers).
 */
export function registerCompletionCommands(program: Command): void {
  program
    .command('completion')
    .description('print a shell completion script: eval "$(quantilica completion bash)", or for zsh: source <(quantilica completion zsh)')
    .argument('<shell>', 'bash or zsh')
    .action((shell: string) => {
      if (shell !== 'bash' && shell !== 'zsh') throw new ClientError(0, ExitCode.usage, `completion ${shell}: allowed: bash, zsh`);
      process.stdout.write(shell === 'bash' ? bashScript(self()) : zshScript(self()));
    });
  program
    .command('__complete', { hidden: true })
    .argument('<index>', 'the index of the word being completed')
    .argument('[words...]', 'the command line, without the program name')
    .action(async (index: string, words: string[]) => {
      const candidates = await complete(program, Number(index), words);
      process.stdout.write(candidates.length > 0 ? `${candidates.join('\n')}\n` : '');
    });
}

/** How this CLI was invoked, quoted for a shell: `quantilica`, or node and the script's path. */
function self(): string {
  const script = process.argv[1] ?? 'quantilica';
  const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  return /(^|\/)quantilica$/.test(script) ? quote(script) : `${quote(process.execPath)} ${quote(script)}`;
}

/**
 * The candidates for word `index` (1-based; `words` has no program name), read from the command tree
 * itself: the command path (`schedule pause`), then options and their values skipped wherever they
 * stand, so what is being completed is a subcommand, an option, an option's value or the n-th argument.
 */
export async function complete(program: Command, index: number, words: string[]): Promise<string[]> {
  const current = words[index - 1] ?? '';
  const before = words.slice(0, Math.max(0, index - 1));
  const matching = (list: readonly string[]) => [...new Set(list)].filter((c) => c.startsWith(current));
  const visible = (c: Command) =>
    c
      .createHelp()
      .visibleCommands(c)
      .map((s) => s.name())
      .filter((n) => n !== 'help');
  let command = program;
  const path: string[] = [];
  const positional: string[] = [];
  let pendingOption: Option | null = null;
  let afterDashes = false;
  for (let i = 0; i < before.length; i++) {
    const word = before[i] ?? '';
    if (pendingOption) {
      pendingOption = null;
      continue;
    }
    if (!afterDashes && word === '--') {
      afterDashes = true;
      continue;
    }
    if (!afterDashes && word.startsWith('-') && word !== '-') {
      // bash splits `--status=x` at the `=`: the `=` and the value are this option's.
      if (before[i + 1] === '=') {
        i += 2;
        continue;
      }
      const option = findOption(command, word.split('=')[0] ?? word);
      if (option && takesValue(option) && !word.includes('=')) pendingOption = option;
      continue;
    }
    const sub = positional.length === 0 ? command.commands.find((c) => c.name() === word || c.aliases().includes(word)) : undefined;
    if (sub && !afterDashes) {
      command = sub;
      path.push(sub.name());
      continue;
    }
    positional.push(word);
  }
  const valuesOf = async (option: Option | null): Promise<string[]> => {
    if (!option || !takesValue(option)) return [];
    const source = VALUE_SOURCES[`${path.join(' ')} ${option.long ?? ''}`] ?? VALUE_SOURCES[option.long ?? ''];
    return source ? source() : [];
  };
  // The value of an option: `--status <TAB>`; `--status=<TAB>` as zsh passes it (one word), and as
  // bash does (`--status`, `=`, the value: bash completes only once a character follows the `=`).
  if (pendingOption) return matching(await valuesOf(pendingOption));
  if (current === '=') return [];
  if (before.at(-1) === '=') return matching(await valuesOf(findOption(command, before.at(-2) ?? '')));
  const joined = afterDashes ? null : /^(--[^=]+)=(.*)$/.exec(current);
  if (joined) {
    const [, flag = '', typed = ''] = joined;
    return (await valuesOf(findOption(command, flag))).filter((v) => v.startsWith(typed)).map((v) => `${flag}=${v}`);
  }
  if (!afterDashes && current.startsWith('-')) {
    const options = command.options.filter((o) => !o.hidden);
    return matching([...options.flatMap((o) => [o.long, o.short].filter((f): f is string => f !== undefined)), '--help']);
  }
  if (positional.length === 0 && !afterDashes && visible(command).length > 0) {
    // `schedule <TAB>`: its subcommands (a command that also acts alone has no argument to offer).
    return matching(visible(command));
  }
  const declared = command.registeredArguments;
  const argument = declared[Math.min(positional.length, declared.length - 1)];
  if (!argument || (positional.length >= declared.length && !argument.variadic)) return [];
  const source = VALUE_SOURCES[`${path.join(' ')} ${argument.name()}`] ?? VALUE_SOURCES[argument.name()];
  return source ? matching(await source()) : [];
}

function findOption(command: Command, flag: string): Option | null {
  for (let c: Command | null = command; c; c = c.parent) {
    const option = c.options.find((o) => o.long === flag || o.short === flag);
    if (option) return option;
  }
  return null;
}

/** `--status <status>` or `--x [value]`; a flag such as `--detach` or `--no-wait` takes none. */
function takesValue(option: Option): boolean {
  return option.required || option.optional;
}

function fetcherNames(): string[] {
  try {
    const config = loadConfig();
    const catalog = config.catalogPath ? Catalog.load(config.catalogPath) : demoCatalog(config);
    return catalog.entries.flatMap((e) => [e.name, ...(e.aliases ?? [])]);
  } catch {
    return [];
  }
}

/** Recent run ids from the running agent; none (quickly) when no agent answers. */
async function runIds(): Promise<string[]> {
  try {
    const link = await Promise.race([openRemoteLink(loadConfig()), new Promise<null>((resolve) => setTimeout(() => resolve(null), 1500))]);
    if (!link) return [];
    try {
      return (await link.listRuns(30)).map((r) => r.runId);
    } finally {
      await link.close();
    }
  } catch {
    return [];
  }
}

function bashScript(cmd: string): string {
  return `# quantilica completion for bash: eval "$(quantilica completion bash)"
_quantilica() {
  local IFS=$'\\n'
  COMPREPLY=($(${cmd} __complete -- "$COMP_CWORD" "\${COMP_WORDS[@]:1}" 2>/dev/null))
}
complete -o default -F _quantilica quantilica
`;
}

function zshScript(cmd: string): string {
  return `#compdef quantilica
# quantilica completion for zsh: source <(quantilica completion zsh)
_quantilica() {
  local -a candidates
  candidates=("\${(@f)$(${cmd} __complete -- $((CURRENT - 1)) "\${words[@]:1}" 2>/dev/null)}")
  compadd -a candidates
}
if (( $+functions[compdef] )); then compdef _quantilica quantilica; fi
`;
}
