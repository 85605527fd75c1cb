import type { Command } from 'commander';
import { Catalog } from '../catalog/catalog';
import { demoCatalog } from '../catalog/demoCatalog';
import { loadConfig } from '../config/config';
import { ClientError } from '../errors';
import { ExitCode } from '../exitCodes';
import { openRemoteLink } from './openLink';

const STATUSES = ['waiting', 'running', 'completed', 'failed', 'cancelled', 'skipped'];
/** Subcommands whose first argument is a fetcher; those marked `true` also take a run id. */
const TAKES_FETCHER: Record<string, boolean> = { run: false, cancel: true, logs: true, pause: false, resume: false };

/**
 * `quantilica completion bash|zsh` prints a completion script; the script asks the hidden
 * `quantilica __complete <index> <words…>` for candidates, so fetcher names come from the catalog
 * the agent uses and run ids from the running agent (when one answers).
 */
export function registerCompletionCommands(program: Command): void {
  program.command('completion')
    .description('print a shell completion script: eval "$(quantilica completion bash)", or for zsh: source <(quantilica completion zsh)')
    .argument('<shell>', 'bash or zsh')
    .action((shell: string) => {
      if (shell !== 'bash' && shell !== 'zsh') throw new ClientError(0, ExitCode.usage, `completion ${shell}: allowed: bash, zsh`);
      process.stdout.write(shell === 'bash' ? bashScript(self()) : zshScript(self()));
    });
  program.command('__complete', { hidden: true })
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

async function complete(program: Command, index: number, words: string[]): Promise<string[]> {
  const current = words[index - 1] ?? '';
  const previous = words[index - 2] ?? '';
  const matching = (list: string[]) => list.filter((c) => c.startsWith(current));
  if (index <= 1) return matching(program.commands.filter((c) => !(c as Command & { _hidden?: boolean })._hidden).map((c) => c.name()));
  if (previous === '--status') return matching(STATUSES);
  if (previous === '--fetcher') return matching(fetcherNames());
  const command = words[0] ?? '';
  const sub = command === 'schedule' ? words[1] ?? '' : command;
  if (command === 'schedule' && index === 2) return matching(['pause', 'resume']);
  if (command === 'completion') return matching(['bash', 'zsh']);
  const argIndex = command === 'schedule' ? 3 : 2;
  if (index !== argIndex || !(sub in TAKES_FETCHER)) return [];
  const names = fetcherNames();
  return matching(TAKES_FETCHER[sub] ? [...names, ...(await runIds())] : names);
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
  COMPREPLY=($(${cmd} __complete "$COMP_CWORD" "\${COMP_WORDS[@]:1}" 2>/dev/null))
}
complete -o default -F _quantilica quantilica
`;
}

function zshScript(cmd: string): string {
  return `#compdef quantilica
# quantilica completion for zsh: source <(quantilica completion zsh)
_quantilica() {
  local -a candidates
  candidates=("\${(@f)$(${cmd} __complete $((CURRENT - 1)) "\${words[@]:1}" 2>/dev/null)}")
  compadd -a candidates
}
if (( $+functions[compdef] )); then compdef _quantilica quantilica; fi
`;
}
