// First: it sets the agent's young generation before the other modules are evaluated (youngGeneration.ts).
import './memory/youngGeneration';
import { runCli } from './cli/runCli';
import { makeFilesPrivate } from './config/umask';

// Everything the agent and the CLI write is private to the user; fetchers get the original umask back.
makeFilesPrivate();

// The `quantilica` command: `agent` runs the agent in the foreground; the other commands talk to a
// running agent, or work in-process with the same slots when none runs.
runCli(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : String(err));
    process.exitCode = 1;
  },
);
